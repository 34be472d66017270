//! `peapod apply -f FILE...`: sends each manifest to the daemon, which validates every document
//! before acting, and prints `pod/NAME created|configured|unchanged`.

use super::{manifest, Clients, KubeError, NamespaceArg};
use peapod_proto::pods as api;

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// Manifest file, directory (its *.yaml, *.yml, *.json) or `-` for stdin; repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

pub async fn run(c: &mut Clients, a: ApplyArgs) -> anyhow::Result<()> {
    for source in manifest::read_sources(&a.files)? {
        let results = c
            .pods
            .apply(api::ApplyRequest {
                namespace: a.ns.namespace.clone(),
                manifest: source.bytes,
                source: source.name.clone(),
            })
            .await
            .map_err(|s| KubeError::from_status(s, ""))?
            .into_inner()
            .results;
        for r in results {
            println!("pod/{} {}", r.name, r.action);
        }
    }
    Ok(())
}
