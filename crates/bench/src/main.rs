//! `quaver-bench`: see the library's documentation and docs/bench.md.

fn main() {
    std::process::exit(quaver_bench::cli::main_with(std::env::args().collect()));
}
