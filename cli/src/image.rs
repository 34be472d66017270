//! `peapod image ...`: pull (with a progress bar), ls, rm, inspect and import, all through
//! the daemon's CRI ImageService (the daemon owns the image store).

use anyhow::{bail, Context};
use clap::Subcommand;
use peapod_image::{LayerStatus, PullProgress};
use peapod_proto::v1 as cri;
use peapod_uds::client::Cri;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Pull an image (CRI PullImage) with a progress bar; prints the image id.
    ///
    /// The bar is drawn on stderr from the progress file the daemon's store writes while the
    /// pull runs, so it needs the daemon's root (asked from the daemon, or --root).
    Pull {
        /// Image reference (`busybox`, `registry:5000/app:1`, `name@sha256:...`).
        reference: String,
        /// Registry credentials, `USER:PASSWORD`.
        #[arg(long, value_name = "USER:PASSWORD")]
        creds: Option<String>,
        /// The daemon's --root, where it writes pull progress (default: asked from the
        /// daemon's verbose Status, else /var/lib/peapod).
        #[arg(long)]
        root: Option<PathBuf>,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List images (as `crictl images`), optionally only those a reference names.
    #[command(alias = "list")]
    Ls {
        reference: Option<String>,
        /// Only image ids.
        #[arg(long, short)]
        quiet: bool,
        /// Full image ids.
        #[arg(long)]
        no_trunc: bool,
    },
    /// Remove images (CRI RemoveImage, as `crictl rmi`).
    ///
    /// A reference by tag, digest, id or id prefix removes the whole image it names, with all
    /// its tags (CRI has no "untag"). An image a container still uses disappears from the list
    /// at once; its content stays until that container is removed.
    #[command(alias = "rmi")]
    Rm {
        /// Tags, `name@digest`s, ids or unique id prefixes.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Show an image's status and details (verbose CRI ImageStatus) as JSON.
    Inspect { reference: String },
    /// Import a `docker save` archive or an OCI image-layout tar, with its tags.
    ///
    /// For machines without a registry; gzip- or zstd-compressed archives too. The daemon
    /// reads the file (this is CRI PullImage of `docker-archive:/absolute/path`, which
    /// `crictl pull` can send as well), so it must be on the daemon's machine.
    Import { file: PathBuf },
}

pub async fn run(c: &mut Cri, command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Pull {
            reference,
            creds,
            root,
            quiet,
        } => pull(c, &reference, creds.as_deref(), root, quiet).await,
        ImageCommand::Ls {
            reference,
            quiet,
            no_trunc,
        } => ls(c, reference.as_deref(), quiet, no_trunc).await,
        ImageCommand::Rm { references } => rm(c, &references).await,
        ImageCommand::Inspect { reference } => inspect(c, &reference).await,
        ImageCommand::Import { file } => import(c, &file).await,
    }
}

fn spec(reference: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: reference.to_string(),
        ..Default::default()
    })
}

fn parse_creds(creds: &str) -> anyhow::Result<cri::AuthConfig> {
    let Some((user, password)) = creds.split_once(':') else {
        bail!("--creds must be USER:PASSWORD");
    };
    if user.is_empty() {
        bail!("--creds: the user name is empty");
    }
    Ok(cri::AuthConfig {
        username: user.to_string(),
        password: password.to_string(),
        ..Default::default()
    })
}

/// The daemon's --root, from the configuration its verbose Status reports.
async fn daemon_root(c: &mut Cri) -> Option<PathBuf> {
    let resp = c
        .runtime
        .status(cri::StatusRequest { verbose: true })
        .await
        .ok()?
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(resp.info.get("config")?).ok()?;
    info.pointer("/config/root")?.as_str().map(PathBuf::from)
}

async fn pull(
    c: &mut Cri,
    reference: &str,
    creds: Option<&str>,
    root: Option<PathBuf>,
    quiet: bool,
) -> anyhow::Result<()> {
    let auth = creds.map(parse_creds).transpose()?;
    let root = match root {
        Some(r) => r,
        None => daemon_root(c)
            .await
            .unwrap_or_else(|| PathBuf::from("/var/lib/peapod")),
    };
    // The daemon keeps its image store in <root>/image; its pulls write progress there.
    let progress_file = peapod_image::progress_path(&root.join("image"), reference);
    let mut client = c.image.clone();
    let call = client.pull_image(cri::PullImageRequest {
        image: spec(reference),
        auth,
        sandbox_config: None,
    });
    tokio::pin!(call);
    let mut bar = Bar::new(std::io::stderr().is_terminal());
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let resp = loop {
        tokio::select! {
            r = &mut call => break r,
            _ = tick.tick(), if !quiet => {
                if let Some(p) = peapod_image::read_progress(&progress_file) {
                    bar.draw(&p);
                }
            }
        }
    };
    bar.finish(resp.is_ok());
    let id = resp
        .with_context(|| format!("pull {reference}"))?
        .into_inner()
        .image_ref;
    println!("{id}");
    Ok(())
}

/// A one-line progress bar on stderr: redrawn in place on a terminal, otherwise a line at
/// most every second.
struct Bar {
    tty: bool,
    last: Option<PullProgress>,
    printed_at: Option<Instant>,
    drawn: bool,
}

impl Bar {
    fn new(tty: bool) -> Bar {
        Bar {
            tty,
            last: None,
            printed_at: None,
            drawn: false,
        }
    }

    fn draw(&mut self, p: &PullProgress) {
        if self.last.as_ref() == Some(p) {
            return;
        }
        self.last = Some(p.clone());
        let due = self
            .printed_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !self.tty && !due {
            return;
        }
        self.print(p);
    }

    fn print(&mut self, p: &PullProgress) {
        let line = progress_line(p);
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.printed_at = Some(Instant::now());
        self.drawn = true;
    }

    /// Draws the last state as complete (on success) and ends the line.
    fn finish(&mut self, ok: bool) {
        if let Some(mut p) = self.last.take().filter(|_| ok) {
            p.done_bytes = p.total_bytes;
            for l in &mut p.layers {
                if l.status != LayerStatus::Present {
                    l.status = LayerStatus::Done;
                }
                l.done_bytes = l.size;
            }
            self.print(&p);
        }
        if self.tty && self.drawn {
            eprintln!();
        }
    }
}

const BAR_WIDTH: usize = 30;

/// `REF [=====>    ] 1.2MB/4.5MB, 1/2 layers`
fn progress_line(p: &PullProgress) -> String {
    let frac = if p.total_bytes == 0 {
        0.0
    } else {
        (p.done_bytes as f64 / p.total_bytes as f64).clamp(0.0, 1.0)
    };
    let filled = (frac * BAR_WIDTH as f64).round() as usize;
    let mut bar = "=".repeat(filled);
    if filled < BAR_WIDTH {
        bar.push('>');
        bar.push_str(&" ".repeat(BAR_WIDTH - filled - 1));
    }
    let done_layers = p
        .layers
        .iter()
        .filter(|l| matches!(l.status, LayerStatus::Done | LayerStatus::Present))
        .count();
    format!(
        "{} [{bar}] {}/{}, {done_layers}/{} layers",
        p.reference,
        human_size(p.done_bytes),
        human_size(p.total_bytes),
        p.layers.len()
    )
}

/// Decimal units with four significant digits, as crictl and docker print sizes
/// (`742.4kB`, `1.235MB`).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    let int_digits = if v >= 100.0 {
        3
    } else if v >= 10.0 {
        2
    } else {
        1
    };
    let mut s = format!("{v:.*}", 4 - int_digits);
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{s}{}", UNITS[unit])
}

/// `(repository, tag)` of a `repo:tag`; the tag is after the last colon past the last slash.
fn split_tag(name: &str) -> (&str, &str) {
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[slash..].rfind(':') {
        Some(i) => (&name[..slash + i], &name[slash + i + 1..]),
        None => (name, "<none>"),
    }
}

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..13.min(hex.len())]
}

/// The rows of `image ls`: one per tag; an image without tags shows its repository (from a
/// repo digest) or `<none>`.
fn image_rows(images: &[cri::Image], no_trunc: bool) -> Vec<[String; 4]> {
    let mut rows = Vec::new();
    for img in images {
        let id = if no_trunc {
            img.id.clone()
        } else {
            short_id(&img.id).to_string()
        };
        let size = human_size(img.size);
        let mut names: Vec<(String, String)> = img
            .repo_tags
            .iter()
            .map(|t| {
                let (r, t) = split_tag(t);
                (r.to_string(), t.to_string())
            })
            .collect();
        if names.is_empty() {
            let repo = img
                .repo_digests
                .first()
                .and_then(|d| d.split_once('@'))
                .map_or("<none>", |(r, _)| r);
            names.push((repo.to_string(), "<none>".to_string()));
        }
        for (repo, tag) in names {
            rows.push([repo, tag, id.clone(), size.clone()]);
        }
    }
    rows.sort();
    rows
}

fn table(header: [&str; 4], rows: &[[String; 4]]) -> String {
    let mut width = header.map(str::len);
    for r in rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 4]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                l.push_str(&format!("{cell:<w$}   ", w = width[i]));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header);
    for r in rows {
        line([&r[0], &r[1], &r[2], &r[3]]);
    }
    out
}

async fn ls(
    c: &mut Cri,
    reference: Option<&str>,
    quiet: bool,
    no_trunc: bool,
) -> anyhow::Result<()> {
    let images = c
        .image
        .list_images(cri::ListImagesRequest {
            filter: reference.map(|r| cri::ImageFilter { image: spec(r) }),
        })
        .await
        .context("list images")?
        .into_inner()
        .images;
    if quiet {
        let mut ids: Vec<&str> = images.iter().map(|i| i.id.as_str()).collect();
        ids.sort();
        for id in ids {
            println!("{id}");
        }
        return Ok(());
    }
    let rows = image_rows(&images, no_trunc);
    print!("{}", table(["IMAGE", "TAG", "IMAGE ID", "SIZE"], &rows));
    Ok(())
}

async fn status(
    c: &mut Cri,
    reference: &str,
    verbose: bool,
) -> anyhow::Result<Option<cri::ImageStatusResponse>> {
    let resp = c
        .image
        .image_status(cri::ImageStatusRequest {
            image: spec(reference),
            verbose,
        })
        .await
        .with_context(|| format!("image status of {reference}"))?
        .into_inner();
    Ok(resp.image.is_some().then_some(resp))
}

async fn rm(c: &mut Cri, references: &[String]) -> anyhow::Result<()> {
    let mut failed = 0;
    for r in references {
        let img = match status(c, r, false).await {
            Ok(Some(s)) => s.image.unwrap_or_default(),
            Ok(None) => {
                eprintln!("no such image {r}");
                failed += 1;
                continue;
            }
            Err(e) => {
                eprintln!("{e:#}");
                failed += 1;
                continue;
            }
        };
        // By id: what was looked up is what goes, even if a tag moves meanwhile.
        let res = c
            .image
            .remove_image(cri::RemoveImageRequest {
                image: spec(&img.id),
            })
            .await;
        match res {
            Ok(_) if img.repo_tags.is_empty() => println!("Deleted: {}", img.id),
            Ok(_) => {
                for t in &img.repo_tags {
                    println!("Deleted: {t}");
                }
            }
            Err(e) => {
                eprintln!("remove {r}: {}", e.message());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} images not removed", references.len());
    }
    Ok(())
}

async fn inspect(c: &mut Cri, reference: &str) -> anyhow::Result<()> {
    let Some(resp) = status(c, reference, true).await? else {
        bail!("no such image {reference}");
    };
    let info: serde_json::Value = resp
        .info
        .get("info")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let out = serde_json::json!({ "status": resp.image, "info": info });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// Every image's names, by id (to tell what an import added or renamed).
async fn names_by_id(c: &mut Cri) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    Ok(c.image
        .list_images(cri::ListImagesRequest { filter: None })
        .await
        .context("list images")?
        .into_inner()
        .images
        .into_iter()
        .map(|i| (i.id, i.repo_tags))
        .collect())
}

async fn import(c: &mut Cri, file: &Path) -> anyhow::Result<()> {
    let path = std::fs::canonicalize(file).with_context(|| format!("{}", file.display()))?;
    if !path.is_file() {
        bail!("{} is not a regular file", file.display());
    }
    let Some(path_str) = path.to_str() else {
        bail!("{}: the path is not UTF-8", path.display());
    };
    let before = names_by_id(c).await?;
    let first = c
        .image
        .pull_image(cri::PullImageRequest {
            image: spec(&format!("docker-archive:{path_str}")),
            ..Default::default()
        })
        .await
        .with_context(|| format!("import {}", file.display()))?
        .into_inner()
        .image_ref;
    // CRI answers with one id; an archive of several images shows the others by what changed.
    let after = names_by_id(c).await?;
    for (id, tags) in &after {
        if *id != first && before.get(id) == Some(tags) {
            continue;
        }
        if tags.is_empty() {
            println!("Imported {id}");
        }
        for t in tags {
            println!("Imported {t} ({})", short_id(id));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_like_crictl() {
        assert_eq!(human_size(0), "0B");
        assert_eq!(human_size(999), "999B");
        assert_eq!(human_size(1000), "1kB");
        assert_eq!(human_size(742_400), "742.4kB");
        assert_eq!(human_size(1_234_567), "1.235MB");
        assert_eq!(human_size(12_000_000), "12MB");
    }

    #[test]
    fn tags_split_after_the_last_slash() {
        assert_eq!(
            split_tag("docker.io/library/busybox:latest"),
            ("docker.io/library/busybox", "latest")
        );
        assert_eq!(
            split_tag("127.0.0.1:5000/app:v1"),
            ("127.0.0.1:5000/app", "v1")
        );
        assert_eq!(
            split_tag("127.0.0.1:5000/app"),
            ("127.0.0.1:5000/app", "<none>")
        );
    }

    #[test]
    fn rows_per_tag_and_nameless_images() {
        let imgs = vec![
            cri::Image {
                id: "sha256:0123456789abcdef".into(),
                repo_tags: vec!["x/b:1".into(), "x/a:2".into()],
                size: 1500,
                ..Default::default()
            },
            cri::Image {
                id: "sha256:fedcba9876543210".into(),
                repo_digests: vec!["x/c@sha256:aa".into()],
                size: 10,
                ..Default::default()
            },
        ];
        let rows = image_rows(&imgs, false);
        assert_eq!(
            rows[0],
            ["x/a", "2", "0123456789abc", "1.5kB"].map(String::from)
        );
        assert_eq!(
            rows[1],
            ["x/b", "1", "0123456789abc", "1.5kB"].map(String::from)
        );
        assert_eq!(
            rows[2],
            ["x/c", "<none>", "fedcba9876543", "10B"].map(String::from)
        );
        let t = table(["IMAGE", "TAG", "IMAGE ID", "SIZE"], &rows);
        assert!(
            t.starts_with("IMAGE   TAG      IMAGE ID        SIZE\n"),
            "{t}"
        );
    }
}
