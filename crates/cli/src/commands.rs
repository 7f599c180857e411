//! The control commands: status, ls, link, unlink, volume, graph.

use crate::args::VolumeArgs;
use crate::values::parse_level;
use crate::{dot, present};
use anyhow::{Result, bail};
use quaver_client::Connection;
use std::io::Write;
use std::path::Path;

/// Name this tool gives itself in the server's client list.
pub const CLIENT_NAME: &str = "quaver";

/// Connects to the server at `server` (or the default socket).
pub fn connect(server: Option<&Path>) -> Result<Connection> {
    Ok(Connection::connect(server, CLIENT_NAME)?)
}

/// Writes command output to stdout; a closed pipe (`quaver ls | head`) is not an error.
pub fn print_out(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// `quaver status`.
pub fn status(server: Option<&Path>, as_json: bool) -> Result<()> {
    let mut conn = connect(server)?;
    let st = conn.status()?;
    if as_json {
        return print_out(&(serde_json::to_string_pretty(&st)? + "\n"));
    }
    // Stream names come from the graph; without them the ids still say enough.
    let graph = conn.graph().ok();
    print_out(&present::status_text(&st, graph.as_ref()))
}

/// `quaver ls`.
pub fn ls(server: Option<&Path>, as_json: bool) -> Result<()> {
    let graph = connect(server)?.graph()?;
    if as_json {
        return print_out(&(serde_json::to_string_pretty(&graph)? + "\n"));
    }
    print_out(&present::ls_text(&graph))
}

/// `quaver graph`.
pub fn graph(server: Option<&Path>, as_json: bool) -> Result<()> {
    let graph = connect(server)?.graph()?;
    if as_json {
        return print_out(&(serde_json::to_string_pretty(&graph)? + "\n"));
    }
    print_out(&dot::to_dot(&graph))
}

/// `quaver link` / `quaver unlink`.
pub fn link(server: Option<&Path>, output: &str, input: &str, remove: bool) -> Result<()> {
    let mut conn = connect(server)?;
    if remove {
        conn.unlink(output, input)?;
    } else {
        conn.link(output, input)?;
    }
    Ok(())
}

/// `quaver volume`.
pub fn volume(server: Option<&Path>, args: &VolumeArgs) -> Result<()> {
    let level = args.level.as_deref().map(parse_level).transpose()?;
    let mute = match (args.mute, args.unmute) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    if level.is_none() && mute.is_none() {
        bail!("give a volume level and/or --mute or --unmute");
    }
    connect(server)?.set_volume(&args.node, level, mute)?;
    Ok(())
}
