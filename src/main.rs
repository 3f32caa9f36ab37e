use std::process::ExitCode;

fn main() -> ExitCode {
    mvk::cli::run(std::env::args_os())
}
