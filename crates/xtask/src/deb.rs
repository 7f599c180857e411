//! `xtask deb`: a Debian package of the install layout with prefix `/usr`, built with
//! `dpkg-deb` from a staging root (docs/install.md). Debian's own tools compute what
//! the package needs: `dpkg-shlibdeps` the Depends line, `dpkg-architecture` the
//! architecture; nothing needs compiling (cargo-deb would, on every fresh CI machine).

use crate::BuildOpts;
use crate::install::{Layout, gzip, profile_dir, run_tool, stage, target_dir};
use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package's name.
pub const PACKAGE: &str = "quaver";

/// The Debian revision of this packaging of the workspace's version.
const REVISION: &str = "1";

/// The copyright file (machine-readable format 1.0): the workspace's licence,
/// MIT OR Apache-2.0; Apache-2.0's text is in every Debian system's common-licenses.
const COPYRIGHT: &str = "\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: quaver
Comment: Built from the quaver workspace by `cargo xtask deb`.

Files: *
Copyright: 2026 the quaver developers
License: MIT or Apache-2.0

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the \"Software\"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all
 copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 SOFTWARE.

License: Apache-2.0
 On Debian systems, the complete text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
";

/// The control file's description: a synopsis line, then the long text.
const DESCRIPTION: &str = "\
low-latency sound server for PulseAudio and JACK clients
 quaver is a sound server for Linux: one daemon between applications and
 sound cards that mixes, routes, converts and times audio.
 .
 PulseAudio clients (paplay, pactl, pavucontrol, browsers, GStreamer, mpv)
 work unchanged through its PulseAudio-protocol socket, unmodified JACK
 programs run on it through quaver-jack, and the quaver command line plays,
 records, links and shows the graph. systemd user units start it on the
 first client's connection; it replaces PulseAudio or pipewire-pulse for a
 user's session, one at a time, switched by enabling its socket unit.";

/// Builds the package into `out` (default `<target>/debian`); returns its path.
pub fn run(
    out: Option<&Path>,
    maintainer: &str,
    compress_level: Option<u8>,
    opts: &BuildOpts,
) -> Result<PathBuf> {
    let target = target_dir(opts)?;
    crate::install::build(opts, &target)?;
    let arch = String::from_utf8(run_tool(
        Command::new("dpkg-architecture").arg("-qDEB_HOST_ARCH"),
    )?)?
    .trim()
    .to_string();
    let version = format!("{}-{REVISION}", env!("CARGO_PKG_VERSION"));
    let work = target.join("debian");
    let name = format!("{PACKAGE}_{version}_{arch}");
    let root = work.join(&name);
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("clearing {}", root.display()))?;
    }
    let layout = Layout {
        prefix: "/usr".into(),
        strip: true,
    };
    let files = stage(&layout, &profile_dir(&target, &opts.profile), &root)?;
    let doc = root.join("usr/share/doc").join(PACKAGE);
    std::fs::write(doc.join("copyright"), COPYRIGHT).context("writing copyright")?;
    let changelog = changelog(&version, maintainer)?;
    std::fs::write(doc.join("changelog.Debian.gz"), gzip(changelog.as_bytes())?)
        .context("writing changelog.Debian.gz")?;
    let depends = shlibdeps(&root, &files, &work)?;
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian).context("creating DEBIAN/")?;
    let size_kib = installed_size(&root.join("usr"))?;
    let control = format!(
        "Package: {PACKAGE}\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: {maintainer}\n\
         Installed-Size: {size_kib}\n\
         Depends: {depends}\n\
         Recommends: rtkit\n\
         Suggests: pulseaudio-utils, jackd2, liblilv-0-0\n\
         Section: sound\n\
         Priority: optional\n\
         Description: {DESCRIPTION}\n"
    );
    std::fs::write(debian.join("control"), control).context("writing DEBIAN/control")?;
    std::fs::write(debian.join("md5sums"), md5sums(&root)?).context("writing DEBIAN/md5sums")?;
    let out = out.map_or_else(|| work.clone(), Path::to_path_buf);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let deb = out.join(format!("{name}.deb"));
    let mut build = Command::new("dpkg-deb");
    build.args(["--root-owner-group", "-Zxz"]);
    if let Some(level) = compress_level {
        build.arg(format!("-z{level}"));
    }
    run_tool(build.arg("--build").arg(&root).arg(&deb))?;
    Ok(deb)
}

/// A one-entry Debian changelog, dated from `SOURCE_DATE_EPOCH` when set (reproducible
/// builds) and now otherwise.
fn changelog(version: &str, maintainer: &str) -> Result<String> {
    let mut date = Command::new("date");
    date.arg("-R");
    if let Ok(epoch) = std::env::var("SOURCE_DATE_EPOCH") {
        date.arg("-d").arg(format!("@{epoch}"));
    }
    let date = String::from_utf8(run_tool(&mut date)?)?.trim().to_string();
    Ok(format!(
        "{PACKAGE} ({version}) unstable; urgency=medium\n\n  \
         * Built from the quaver workspace by cargo xtask deb (docs/install.md).\n\n \
         -- {maintainer}  {date}\n"
    ))
}

/// The Depends line for the ELF files among `files`, as dpkg-shlibdeps finds it.
/// dpkg-shlibdeps wants a `debian/control` naming the package: a minimal one is made
/// in a directory of its own under `work`.
fn shlibdeps(root: &Path, files: &[PathBuf], work: &Path) -> Result<String> {
    let dir = work.join("shlibdeps");
    std::fs::create_dir_all(dir.join("debian")).context("creating the shlibdeps directory")?;
    std::fs::write(
        dir.join("debian/control"),
        format!("Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n"),
    )
    .context("writing shlibdeps' debian/control")?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.current_dir(&dir).arg("-O");
    let mut any = false;
    for f in files {
        let staged = root.join(f.strip_prefix("/").unwrap_or(f));
        if std::fs::read(&staged).is_ok_and(|b| b.starts_with(b"\x7fELF")) {
            cmd.arg(format!("-e{}", staged.display()));
            any = true;
        }
    }
    if !any {
        bail!("no ELF files staged in {}", root.display());
    }
    let out = String::from_utf8(run_tool(&mut cmd)?)?;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .with_context(|| format!("dpkg-shlibdeps printed no shlibs:Depends line: {out}"))?;
    Ok(line.trim().to_string())
}

/// Installed-Size: the files' sizes in KiB, each rounded up, as dpkg-gencontrol counts.
fn installed_size(dir: &Path) -> Result<u64> {
    let mut kib = 0;
    for p in walk(dir)? {
        let len = std::fs::symlink_metadata(&p)?.len();
        kib += len.div_ceil(1024);
    }
    Ok(kib.max(1))
}

/// DEBIAN/md5sums: every file under `root` but DEBIAN/, `md5  path` without the
/// leading slash, as dh_md5sums writes it.
fn md5sums(root: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = walk(&root.join("usr"))?;
    files.sort();
    let mut cmd = Command::new("md5sum");
    cmd.current_dir(root);
    for f in &files {
        cmd.arg(f.strip_prefix(root)?);
    }
    let out = String::from_utf8(run_tool(&mut cmd)?)?;
    let mut text = String::new();
    for l in out.lines() {
        writeln!(text, "{l}")?;
    }
    Ok(text)
}

/// Every regular file under `dir`.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    Ok(out)
}
