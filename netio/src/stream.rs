//! A control connection, in clear or under TLS, that reads and writes as a
//! `TcpStream` does and can be cloned into a reader and a writer half.
//!
//! rustls's own `StreamOwned` cannot be split: a thread blocked reading it
//! would hold it from the writer. Here the TLS state sits behind a mutex
//! that a reader takes only to decrypt what it has already received; the
//! wait for bytes happens on the socket, outside the lock. So a reader
//! thread and a writer share one TLS session, and the socket's read
//! timeout still wakes the reader (a stop, an evicted connection).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::{ClientConnection, Connection, ServerConnection};

use crate::tls::{ClientTls, ServerTls};

/// How long a TLS handshake may take before the connection is dropped
/// (a peer that connects and says nothing must not hold a thread).
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// One control connection.
#[derive(Debug)]
pub struct Stream {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<Connection>>>,
}

impl Stream {
    /// A connection in clear.
    pub fn plain(tcp: TcpStream) -> Stream {
        Stream { tcp, tls: None }
    }

    /// The server's side of a TLS connection, after its handshake.
    pub fn accept(tcp: TcpStream, tls: &ServerTls) -> io::Result<Stream> {
        let conn = ServerConnection::new(tls.config()).map_err(io::Error::other)?;
        Stream::handshake(tcp, conn.into())
    }

    /// The client's side of a TLS connection to `addr`, after its handshake.
    pub fn connect(tcp: TcpStream, addr: SocketAddr, tls: &ClientTls) -> io::Result<Stream> {
        let conn =
            ClientConnection::new(tls.config(), tls.name_for(addr)).map_err(io::Error::other)?;
        Stream::handshake(tcp, conn.into())
    }

    /// Runs the handshake within [`HANDSHAKE`], then restores the socket's
    /// timeouts.
    fn handshake(mut tcp: TcpStream, mut conn: Connection) -> io::Result<Stream> {
        let (read, write) = (tcp.read_timeout()?, tcp.write_timeout()?);
        tcp.set_read_timeout(Some(HANDSHAKE))?;
        tcp.set_write_timeout(Some(HANDSHAKE))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).map_err(handshake_error)?;
        }
        // The last flight (a client's Finished) may still be queued.
        while conn.wants_write() {
            conn.write_tls(&mut tcp)?;
        }
        tcp.set_read_timeout(read)?;
        tcp.set_write_timeout(write)?;
        Ok(Stream {
            tcp,
            tls: Some(Arc::new(Mutex::new(conn))),
        })
    }

    /// Whether the connection is under TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A second handle on the same connection (and TLS session).
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(Stream {
            tcp: self.tcp.try_clone()?,
            tls: self.tls.clone(),
        })
    }

    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// How long a read waits for bytes.
    pub fn set_read_timeout(&self, wait: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(wait)
    }

    /// How long a write waits for room.
    pub fn set_write_timeout(&self, wait: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(wait)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.peer_addr()
    }

    /// This end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Closes `how` as `TcpStream::shutdown` does; a TLS peer is told
    /// first when this end stops writing.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        if let (Some(tls), Shutdown::Write | Shutdown::Both) = (&self.tls, how) {
            let mut conn = lock(tls);
            conn.send_close_notify();
            let _ = flush_tls(&mut conn, &self.tcp);
        }
        self.tcp.shutdown(how)
    }

    /// Reads plaintext from the TLS session, receiving more records from
    /// the socket (outside the lock) until some is there.
    fn read_tls(&self, tls: &Mutex<Connection>, buf: &mut [u8]) -> io::Result<usize> {
        let mut raw = [0u8; 16 * 1024];
        loop {
            match lock(tls).reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed the socket without close_notify: closed
                // all the same (a cut line is dropped by the line reader).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let n = (&self.tcp).read(&mut raw)?;
            let mut conn = lock(tls);
            let mut received = &raw[..n];
            loop {
                conn.read_tls(&mut received)?;
                let processed = conn.process_new_packets();
                // An alert for the peer, an answer to a key update.
                let _ = flush_tls(&mut conn, &self.tcp);
                processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if received.is_empty() {
                    break;
                }
            }
        }
    }
}

fn handshake_error(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("TLS handshake: {e}"))
}

fn lock(tls: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    tls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sends what the TLS session has queued.
fn flush_tls(conn: &mut Connection, mut tcp: &TcpStream) -> io::Result<()> {
    while conn.wants_write() {
        conn.write_tls(&mut tcp)?;
    }
    Ok(())
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            None => self.tcp.read(buf),
            Some(tls) => self.read_tls(tls, buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.tls {
            None => self.tcp.write(buf),
            Some(tls) => {
                let mut conn = lock(tls);
                let n = conn.writer().write(buf)?;
                flush_tls(&mut conn, &self.tcp)?;
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &self.tls {
            None => self.tcp.flush(),
            Some(tls) => flush_tls(&mut lock(tls), &self.tcp),
        }
    }
}
