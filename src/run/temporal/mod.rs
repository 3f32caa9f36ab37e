//! A flow in, run as a Temporal workflow: its attempts made by `mvk worker` processes (each in
//! its own clone of the repository), its ledger rows, trail and landings written by the `mvk
//! apply` process that started it (the coordinator); out comes the same `RunReport` as `apply`.
//!
//! Three parts, each on its own task queue:
//! - the workflow [`MvkFlow`] (deterministic: which task starts when, each task's attempts,
//!   the same-failure brake, the iterations budget), run by the coordinator's worker;
//! - the coordinator's activities [`CoordActs`] (begin, record, land, end a task), on the
//!   coordinator's queue: they hand each request to the coordinator's loop, which owns the
//!   run's `Runner` (`driver::remote::Coordinator`), so the ledger has one writer and changes
//!   land through the local executor's merge queue;
//! - the attempt activity [`WorkerActs::attempt`], on the workers' queue: fetch the base from
//!   the coordinator's repository, `mvk attempt` in the worker's clone (worktree, agent, seal,
//!   gates, review, judged as locally), push a passed change to a ref of the coordinator's
//!   repository keyed by workflow, task and attempt number, answer with a small result.
//!
//! Each part has its file ([`workflow`], [`coordinator`], [`worker`]); [`wire`] holds what passes
//! between them.
//!
//! Execution is at-least-once: an attempt may run twice (a worker dying before it reports), so
//! each is a fresh `mvk attempt` run and its push goes to its own ref; the coordinator records an
//! attempt once per number and never lands an attempt whose merge the ledger already holds.

use std::time::Duration;

use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions, Url};

/// Without a heartbeat for this long, an attempt's worker is taken for dead and the attempt is
/// made again elsewhere.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a worker heartbeats while its attempt runs.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// How long a coordinator's answer may go without a heartbeat before the request is taken for
/// lost (its `mvk apply` dead) and asked again: long, since a busy coordinator (a gate's output
/// written, the ledger) must not be taken for dead and asked twice.
const COORD_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a fetch of a base or a push of a change may take.
const TRANSFER_LIMIT: Duration = Duration::from_secs(10 * 60);

/// How long a cancelled attempt has, after SIGTERM, to stop its agent and gates and close its
/// attempt before the worker kills it outright.
const CANCEL_GRACE: Duration = Duration::from_secs(30);

/// Added to an agent's timeout for the rest of an attempt (fetch, gates, review, push).
const ATTEMPT_SLACK: Duration = Duration::from_secs(30 * 60);
/// The prefix of the refs workers push passed changes to, in the coordinator's repository.
pub(crate) const REF_PREFIX: &str = "refs/mvk/temporal";

/// Where the Temporal server is and which queue attempts go to.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// `HOST:PORT` (or a URL).
    pub(crate) address: String,
    pub(crate) task_queue: String,
    /// The server's namespace the workflows run in (`default` unless told).
    pub(crate) namespace: String,
}

impl Endpoint {
    fn url(&self) -> Result<Url, String> {
        let text = if self.address.contains("://") {
            self.address.clone()
        } else {
            format!("http://{}", self.address)
        };
        Url::parse(&text).map_err(|e| format!("`{}` is not a server address: {e}", self.address))
    }

    async fn client(&self, identity: String) -> Result<Client, String> {
        let conn = Connection::connect(
            ConnectionOptions::new(self.url()?)
                .identity(identity)
                .build(),
        )
        .await
        .map_err(|e| {
            format!(
                "cannot reach the Temporal server at `{}`: {e}",
                self.address
            )
        })?;
        Client::new(conn, ClientOptions::new(self.namespace.clone()).build())
            .map_err(|e| format!("cannot make a Temporal client: {e}"))
    }
}

mod coordinator;
mod wire;
mod worker;
mod workflow;

pub(crate) use coordinator::{Temporal, recorded_endpoint, resume};
pub use wire::{AttemptIn, AttemptOut, FlowIn, Limits, RungIn, TaskIn};
pub use worker::change_ref;
pub(crate) use worker::worker;
