pub fn run(_: &BenchArgs) -> anyhow::Result<()> {
    Ok(())
}
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}
