use clap::Parser;
use delayline::cli::Opts;

fn main() {
    let opts = Opts::parse();
    if let Err(err) = delayline::run(opts) {
        eprintln!("delayline: error: {err:#}");
        std::process::exit(1);
    }
}
