//! `quaver`, the command line for the quaver sound server.

fn main() -> std::process::ExitCode {
    quaver_cli::main()
}
