//! The exporter's HTTP/1.1 server: a GET handler that one client cannot stall or blow up.
//!
//! * bounded concurrency: a fixed pool of [`Limits::workers`] threads takes connections from a
//!   queue of [`Limits::queue`]; a connection that finds the queue full is answered `503` at
//!   once and closed;
//! * a deadline per connection ([`Limits::deadline`]) for the request head, and the same for
//!   writing the answer: a client that sends slowly or reads slowly loses its connection;
//! * capped header bytes ([`Limits::header_bytes`]): past them, `431` and close, so a client
//!   sending endless headers costs one fixed buffer;
//! * no body is ever read: every answer is `Connection: close`, a request body is dropped with
//!   the socket, so a huge declared `Content-Length` costs nothing;
//! * only `GET` and `HEAD` (`405` otherwise).
//!
//! The request head is parsed by `httparse` (hyper's parser); tiny_http, used before, could
//! not bound header bytes or skip bodies (it drained them, stalling every scrape), and hyper
//! would bring an async runtime for one endpoint.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one client may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub workers: usize,
    /// Connections waiting for a worker; more are answered `503`.
    pub queue: usize,
    /// Time to receive the request head, and again to send the answer.
    pub deadline: Duration,
    /// Bytes of request line and headers.
    pub header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            workers: 8,
            queue: 32,
            deadline: Duration::from_secs(5),
            header_bytes: 16 << 10,
        }
    }
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The path, without the query.
    pub path: String,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text answer.
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// Serves `listener` forever with `handler`, within `limits`.
pub fn serve<H>(listener: TcpListener, limits: Limits, handler: H) -> io::Result<()>
where
    H: Fn(&Request) -> Response + Send + Sync + 'static,
{
    let handler: Arc<Handler> = Arc::new(handler);
    let (tx, rx): (SyncSender<TcpStream>, Receiver<TcpStream>) = sync_channel(limits.queue);
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..limits.workers.max(1) {
        let rx = Arc::clone(&rx);
        let handler = Arc::clone(&handler);
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || {
                loop {
                    // The lock is held only while waiting for the next connection.
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(stream) = next else { return };
                    serve_one(stream, &limits, &*handler);
                }
            })?;
    }
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => match tx.try_send(stream) {
                Ok(()) => {}
                Err(TrySendError::Full(stream)) => {
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
                    answer(
                        stream,
                        &Response::text(503, "busy, try again\n"),
                        false,
                        Duration::from_millis(200),
                    );
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(io::Error::other("every HTTP worker has stopped"));
                }
            },
            // Out of descriptors, a connection reset before accept, ...: keep serving.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Ok(())
}

/// What the head read from a connection says.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Get(Request, bool),
    Answer(Response),
    Gone,
}

fn serve_one(mut stream: TcpStream, limits: &Limits, handler: &Handler) {
    let start = Instant::now();
    let head = read_head(&mut stream, limits, start + limits.deadline);
    let (resp, body) = match head {
        Head::Gone => return,
        Head::Answer(r) => (r, true),
        Head::Get(req, is_head) => (handler(&req), !is_head),
    };
    answer(stream, &resp, body, limits.deadline);
}

fn read_head(stream: &mut TcpStream, limits: &Limits, deadline: Instant) -> Head {
    let mut buf = vec![0u8; limits.header_bytes];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::Answer(Response::text(408, "request head too slow\n"));
        }
        if len == buf.len() {
            return Head::Answer(Response::text(431, "request head too large\n"));
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Head::Gone,
            Ok(n) => len += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Head::Answer(Response::text(408, "request head too slow\n"));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Head::Gone,
        }
        match parse_head(&buf[..len]) {
            Ok(Some(h)) => return h,
            Ok(None) => continue,
            Err(r) => return Head::Answer(r),
        }
    }
}

/// The head in `buf`: `Ok(None)` while incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let method = req.method.unwrap_or("");
            let is_head = method == "HEAD";
            if method != "GET" && !is_head {
                return Err(Response::text(405, "only GET and HEAD\n"));
            }
            let target = req.path.unwrap_or("/");
            let path = target.split('?').next().unwrap_or("/").to_owned();
            let accept = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("accept"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            Ok(Some(Head::Get(Request { path, accept }, is_head)))
        }
        Err(httparse::Error::TooManyHeaders) => {
            Err(Response::text(431, "too many request headers\n"))
        }
        Err(_) => Err(Response::text(400, "bad request\n")),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Writes the answer within `timeout` and closes the connection without reading further.
fn answer(mut stream: TcpStream, r: &Response, body: bool, timeout: Duration) {
    let _ = stream.set_write_timeout(Some(timeout.max(Duration::from_millis(100))));
    let allow = if r.status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    let _ = stream.write_all(head.as_bytes()).and_then(|()| {
        if body {
            stream.write_all(&r.body)
        } else {
            Ok(())
        }
    });
    let _ = stream.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        let get = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\n\r\n");
        assert_eq!(
            get,
            Ok(Some(Head::Get(
                Request {
                    path: "/metrics".into(),
                    accept: Some("text/plain".into())
                },
                false
            )))
        );
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHost:"), Ok(None));
        let post = parse_head(b"POST /metrics HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n");
        assert_eq!(post.unwrap_err().status, 405);
        assert_eq!(
            parse_head(b"\x01\x02 / HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        let many: String = (0..100).map(|i| format!("X-{i}: a\r\n")).collect();
        let r = parse_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert_eq!(r.unwrap_err().status, 431);
    }
}
