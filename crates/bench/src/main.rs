//! `quaver-bench`: see the library's documentation and docs/bench.md.

fn main() {
    if let Err(e) = quaver_bench::tools::exec::stop_children_on_signal() {
        eprintln!("quaver-bench: cannot watch for stop signals: {e}");
    }
    std::process::exit(quaver_bench::cli::main_with(std::env::args().collect()));
}
