//! The control commands: status, ls, link, unlink, volume, graph (`quantum` has a file
//! of its own).

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
    // Stream names come from the graph; without them the ids still say enough. An
    // older server has no per-node timing.
    let graph = conn.graph().ok();
    let timing = conn.timing().ok();
    print_out(&present::status_text(&st, graph.as_ref(), timing.as_ref()))
}

/// Clears the terminal and moves the cursor home, so each frame of `top` replaces the
/// last one.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// `quaver top`: the per-node timing every `interval`, redrawn in place on a terminal
/// (one frame after another otherwise, or one JSON object per line with `json`);
/// `iterations` frames, or until interrupted.
pub fn top(
    server: Option<&Path>,
    interval: std::time::Duration,
    iterations: Option<u64>,
    as_json: bool,
) -> Result<()> {
    use std::io::IsTerminal;
    let mut conn = connect(server)?;
    // The first reply ends whatever interval an earlier reader left open; every frame
    // then covers one of ours.
    conn.timing()?;
    let redraw = !as_json && iterations != Some(1) && std::io::stdout().is_terminal();
    let mut shown = 0u64;
    while iterations.is_none_or(|n| shown < n) {
        std::thread::sleep(interval);
        let t = conn.timing()?;
        let text = if as_json {
            serde_json::to_string(&t)? + "\n"
        } else if redraw {
            format!("{CLEAR_SCREEN}{}", present::top_text(&t))
        } else if shown > 0 {
            format!("\n{}", present::top_text(&t))
        } else {
            present::top_text(&t)
        };
        print_out(&text)?;
        shown += 1;
    }
    Ok(())
}

/// `quaver ls`.
pub fn ls(server: Option<&Path>, as_json: bool) -> Result<()> {
    let mut conn = connect(server)?;
    let graph = conn.graph()?;
    if as_json {
        return print_out(&(serde_json::to_string_pretty(&graph)? + "\n"));
    }
    // Port aliases (JACK's, set by `jack_alias` and the like); a server without them
    // refuses the request and the listing has none.
    let aliases = match conn.request(quaver_protocol::Request::Aliases) {
        Ok((quaver_protocol::Reply::Aliases { ports }, _)) => ports,
        _ => Vec::new(),
    };
    // Network devices' figures come from the status; without it the listing has none.
    let devices = conn.status().map(|st| st.devices).unwrap_or_default();
    print_out(&(present::ls_text_with(&graph, &devices) + &present::aliases_text(&graph, &aliases)))
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
