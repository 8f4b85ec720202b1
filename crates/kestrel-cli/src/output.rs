//! Writing to stdout without panicking when the reader goes away (`kestrel inspect | head`).

use std::io::{ErrorKind, Write};

/// Write `text` to stdout; a closed pipe is not an error.
pub fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing to stdout: {e}")),
    }
}
