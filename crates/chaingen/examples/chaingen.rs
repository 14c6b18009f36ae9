//! `osprey chaingen` without the rest of the binary, for measuring the
//! generator on its own:
//! `cargo run --release -p osprey-chaingen --example chaingen -- --preset small --out /tmp/small`.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "chaingen")]
struct Cli {
    #[command(flatten)]
    chaingen: osprey_chaingen::ChaingenArgs,
}

fn main() -> anyhow::Result<()> {
    osprey_chaingen::run(Cli::parse().chaingen)
}
