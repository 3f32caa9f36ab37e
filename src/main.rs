use std::process::ExitCode;

fn main() -> ExitCode {
    mvk::entry::run(std::env::args_os())
}
