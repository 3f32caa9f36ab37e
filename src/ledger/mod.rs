//! The SQLite ledger (`.mvk/ledger.db`): runs, tasks, attempts, gate results, costs, events and
//! merges in; durable rows, each transition written before its effect, out.
