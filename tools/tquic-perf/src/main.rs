fn main() {
    let opts = match tquic_perf::cli::parse_args(std::env::args_os()) {
        Ok(o) => o,
        Err(e) => e.exit(),
    };
    if let Err(e) = tquic_perf::run(opts) {
        tquic_perf::glog!('E', "error: {e:#}");
        std::process::exit(1);
    }
}
