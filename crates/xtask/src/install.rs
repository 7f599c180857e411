//! The install layout (docs/install.md) and `xtask install`.
//!
//! Everything goes under PREFIX, written below DESTDIR when one is given (a staging
//! root for packagers; the files themselves name PREFIX):
//!
//! | file | where |
//! |---|---|
//! | quaverd, quaver, quaver-bench, quaver-jack | PREFIX/bin |
//! | quaver's libjack.so.0 | PREFIX/lib/quaver/jack (private: only quaver-jack's program sees it) |
//! | the annotated config | PREFIX/share/doc/quaver/examples/quaver.toml |
//! | quaverd.socket, quaverd.service | PREFIX/lib/systemd/user (ExecStart names PREFIX/bin/quaverd) |
//! | man pages | PREFIX/share/man/man1/*.1.gz |
//! | completions | PREFIX/share/bash-completion/completions, PREFIX/share/zsh/{site-functions or vendor-completions}, PREFIX/share/fish/vendor_completions.d |

use crate::BuildOpts;
use crate::pages;
use anyhow::{Context, Result, bail};
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (where Cargo.toml, config/ and dist/ are).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The programs installed into PREFIX/bin.
pub const BINARIES: [&str; 4] = ["quaverd", "quaver", "quaver-bench", "quaver-jack"];

/// Where the programs of a layout live and what the packaging asks of it.
pub struct Layout {
    /// The install prefix (`/usr`, `/usr/local`, `~/.local`).
    pub prefix: PathBuf,
    /// Strip the binaries and the library.
    pub strip: bool,
}

impl Layout {
    /// zsh's directory for packaged completions: Debian's zsh reads
    /// `/usr/share/zsh/vendor-completions`; every zsh reads `site-functions` under
    /// `/usr/local` (and other distributions' under `/usr`).
    fn zsh_dir(&self) -> &'static str {
        if self.prefix == Path::new("/usr") && Path::new("/etc/debian_version").exists() {
            "share/zsh/vendor-completions"
        } else {
            "share/zsh/site-functions"
        }
    }

    /// `rel` under the prefix, under `root`.
    fn path(&self, root: &Path, rel: &str) -> PathBuf {
        let abs = self.prefix.join(rel);
        root.join(abs.strip_prefix("/").unwrap_or(&abs))
    }
}

/// The directory of a cargo profile's outputs: `dev` builds into `debug/`.
pub fn profile_dir(target: &Path, profile: &str) -> PathBuf {
    target.join(if profile == "dev" { "debug" } else { profile })
}

/// Cargo's target directory: the option, else `$CARGO_TARGET_DIR`, else the one this
/// tool's binary was built into (`<target>/<profile>/xtask`).
pub fn target_dir(opts: &BuildOpts) -> Result<PathBuf> {
    if let Some(d) = &opts.target_dir {
        return Ok(d.clone());
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe().context("finding this tool's path")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("this tool is not inside a cargo target directory; pass --target-dir")
}

/// Builds the programs and the library with cargo (`--workspace` without `--bins`:
/// the library target is what copies `libjack.so` out of `deps/`).
pub fn build(opts: &BuildOpts, target: &Path) -> Result<()> {
    if opts.no_build {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let st = Command::new(&cargo)
        .args([
            "build",
            "--workspace",
            "--exclude",
            "quaver-xtask",
            "--profile",
        ])
        .arg(&opts.profile)
        .env("CARGO_TARGET_DIR", target)
        .current_dir(workspace())
        .status()
        .with_context(|| format!("running {}", cargo.to_string_lossy()))?;
    if !st.success() {
        bail!("cargo build failed ({st})");
    }
    Ok(())
}

/// The built libjack.so: the newer of the one cargo copied up and the one in `deps/`
/// (`cargo build --bins` leaves only that one).
fn built_libjack(bins: &Path) -> Result<PathBuf> {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [bins.join("libjack.so"), bins.join("deps/libjack.so")]
        .into_iter()
        .filter_map(|p| mtime(&p).map(|t| (t, p)))
        .max()
        .map(|(_, p)| p)
        .with_context(|| format!("no libjack.so in {} or its deps/", bins.display()))
}

/// What one installed file is made from.
enum Source {
    File(PathBuf),
    Text(Vec<u8>),
}

/// Writes `src` to `dest` with `mode`, making its directories (0755).
fn put(dest: &Path, src: Source, mode: u32) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = dest.parent().context("a file without a directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(dest);
    match src {
        Source::File(p) => std::fs::copy(&p, dest)
            .map(drop)
            .with_context(|| format!("copying {} to {}", p.display(), dest.display()))?,
        Source::Text(t) => {
            std::fs::write(dest, t).with_context(|| format!("writing {}", dest.display()))?
        }
    }
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", dest.display()))
}

/// Runs `cmd`, failing with its stderr.
pub fn run_tool(cmd: &mut Command) -> Result<Vec<u8>> {
    let out = cmd
        .output()
        .with_context(|| format!("running {cmd:?} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// `gzip -9n`: no name or time stamp inside, so the same page gives the same bytes.
pub fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .arg("-9n")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = child.stdin.take().context("gzip's stdin")?;
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().context("waiting for gzip")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// The systemd user units with ExecStart pointing into PREFIX.
fn units(prefix: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let dir = workspace().join("dist/systemd/user");
    let quaverd = prefix.join("bin/quaverd");
    let mut out = Vec::new();
    for name in ["quaverd.socket", "quaverd.service"] {
        let p = dir.join(name);
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let text = text.replace(
            "ExecStart=/usr/bin/quaverd",
            &format!("ExecStart={}", quaverd.display()),
        );
        out.push((name.to_string(), text.into_bytes()));
    }
    Ok(out)
}

/// Writes files of a layout under a root and lists them.
struct Stager<'a> {
    layout: &'a Layout,
    root: &'a Path,
    files: Vec<PathBuf>,
}

impl Stager<'_> {
    /// Installs `src` as PREFIX/`rel` with `mode`; `strip` for the binaries and the
    /// library when the layout asks for stripped ones.
    fn add(&mut self, rel: &str, src: Source, mode: u32, strip: bool) -> Result<()> {
        let dest = self.layout.path(self.root, rel);
        put(&dest, src, mode)?;
        if strip && self.layout.strip {
            // What Debian's dh_strip does for programs and shared libraries.
            run_tool(
                Command::new("strip")
                    .args(["--remove-section=.comment", "--remove-section=.note"])
                    .arg("--strip-unneeded")
                    .arg(&dest),
            )?;
        }
        self.files.push(self.layout.prefix.join(rel));
        Ok(())
    }
}

/// Writes the whole layout under `root` (DESTDIR, or `/`) from the programs built in
/// `bins`; returns the installed files as absolute paths in the installed system.
pub fn stage(layout: &Layout, bins: &Path, root: &Path) -> Result<Vec<PathBuf>> {
    let mut st = Stager {
        layout,
        root,
        files: Vec::new(),
    };
    for bin in BINARIES {
        let src = bins.join(bin);
        if !src.is_file() {
            bail!("{} is not built (cargo build --workspace)", src.display());
        }
        st.add(&format!("bin/{bin}"), Source::File(src), 0o755, true)?;
    }
    let lib = built_libjack(bins)?;
    st.add(
        "lib/quaver/jack/libjack.so.0",
        Source::File(lib),
        0o644,
        true,
    )?;
    let config = workspace().join("config/quaver.toml");
    let examples = "share/doc/quaver/examples/quaver.toml";
    st.add(examples, Source::File(config), 0o644, false)?;
    for (name, text) in units(&layout.prefix)? {
        let rel = format!("lib/systemd/user/{name}");
        st.add(&rel, Source::Text(text), 0o644, false)?;
    }
    for (name, text) in pages::man_pages(&layout.prefix)? {
        let rel = format!("share/man/man1/{name}.gz");
        st.add(&rel, Source::Text(gzip(&text)?), 0o644, false)?;
    }
    for (shell, _) in pages::SHELLS {
        let dir = match shell {
            Shell::Bash => "share/bash-completion/completions",
            Shell::Zsh => layout.zsh_dir(),
            _ => "share/fish/vendor_completions.d",
        };
        for (name, text) in pages::completions(shell) {
            st.add(&format!("{dir}/{name}"), Source::Text(text), 0o644, false)?;
        }
    }
    Ok(st.files)
}

/// `xtask install`: builds unless told not to, then writes the layout under DESTDIR
/// (or `/`). Returns the installed files.
pub fn run(prefix: &Path, destdir: Option<&Path>, opts: &BuildOpts) -> Result<Vec<PathBuf>> {
    if !prefix.is_absolute() {
        bail!("PREFIX must be an absolute path, not {}", prefix.display());
    }
    let target = target_dir(opts)?;
    build(opts, &target)?;
    let layout = Layout {
        prefix: prefix.to_path_buf(),
        strip: opts.strip,
    };
    let root = destdir.unwrap_or(Path::new("/"));
    let files = stage(&layout, &profile_dir(&target, &opts.profile), root)?;
    for f in &files {
        println!("{}", root.join(f.strip_prefix("/").unwrap_or(f)).display());
    }
    Ok(files)
}
