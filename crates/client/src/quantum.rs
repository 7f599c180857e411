//! The graph's clock as a server setting: forcing, releasing and reporting the quantum,
//! and freewheeling.

use crate::{ClientError, Connection, Result, unexpected};
use quaver_protocol::{QuantumReport, Reply, Request};

impl Connection {
    /// Forces the graph's quantum for everyone (JACK's `jack_set_buffer_size`), or
    /// releases it with `None`; it stays after this connection closes. The server
    /// refuses a value that is not a power of two or outside its bounds.
    pub fn force_quantum(&mut self, quantum: Option<u32>) -> Result<()> {
        let req = Request::ForceQuantum { quantum };
        req.validate().map_err(ClientError::InvalidArgument)?;
        self.request_ok(req)
    }

    /// Starts or stops JACK's freewheel (the graph runs as fast as its clients allow,
    /// detached from the devices); it stays after this connection closes.
    pub fn set_freewheel(&mut self, on: bool) -> Result<()> {
        self.request_ok(Request::SetFreewheel { on })
    }

    /// The quantum in force, why, and the bounds.
    pub fn quantum(&mut self) -> Result<QuantumReport> {
        match self.request(Request::Quantum)?.0 {
            Reply::Quantum(q) => Ok(q),
            other => Err(unexpected("quantum", &other)),
        }
    }
}
