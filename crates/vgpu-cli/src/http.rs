//! The exporter's HTTP/1.1 server: GET and HEAD answered from one thread that polls every
//! connection (mio), so that no client, and no number of clients, can stall a scrape or grow
//! the exporter without bound.
//!
//! * nothing blocks: a connection that sends its head slowly, or reads its answer slowly,
//!   holds a buffer and a descriptor, never a thread;
//! * a head deadline ([`Limits::head_deadline`], short: Prometheus sends its head at once)
//!   and a deadline to send the answer ([`Limits::write_deadline`]);
//! * bounded connections: at most [`Limits::per_peer`] from one address and
//!   [`Limits::connections`] in all; a newcomer past either cap **evicts** the oldest
//!   connection still reading its head (of that address, else of all), so idle connections can
//!   never lock a scraper out; only when every connection is answering is a newcomer refused;
//! * bounded memory: a head buffer grows to [`Limits::header_bytes`] at most (past it, `431`),
//!   and at most [`Limits::writers`] answers are held at once (a head completed past that
//!   evicts the oldest one being sent);
//! * no body is ever read: every answer is `Connection: close` and a request body is dropped
//!   with the socket, so a huge declared `Content-Length` costs nothing;
//! * only `GET` and `HEAD` (`405` otherwise).
//!
//! The request head is parsed by `httparse` (hyper's parser); the handler runs on the polling
//! thread, one request at a time.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener};
use std::time::{Duration, Instant};

use mio::net::{TcpListener as MioListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// What clients may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, all peers together.
    pub connections: usize,
    /// Connections open at once from one IP address.
    pub per_peer: usize,
    /// Answers being sent at once.
    pub writers: usize,
    /// Time from accept to a complete request head.
    pub head_deadline: Duration,
    /// Time to send the answer.
    pub write_deadline: Duration,
    /// Bytes of request line and headers.
    pub header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 512,
            per_peer: 32,
            writers: 8,
            head_deadline: Duration::from_secs(3),
            write_deadline: Duration::from_secs(10),
            header_bytes: 8 << 10,
        }
    }
}

impl Limits {
    /// These limits with no more connections than `nofile` descriptors allow (a quarter of
    /// them: the exporter opens region files too).
    pub fn within_descriptors(mut self, nofile: u64) -> Limits {
        let fit = usize::try_from(nofile / 4).unwrap_or(usize::MAX).max(16);
        self.connections = self.connections.min(fit);
        self.per_peer = self.per_peer.min(self.connections);
        self
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; returns the soft limit in
/// force afterwards.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `lim`, a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads `raised`, a valid rlimit within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    lim.rlim_cur
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

const LISTENER: Token = Token(usize::MAX);

/// One connection's state.
enum State {
    /// Reading the request head (`buf` grows to the header cap).
    Head(Vec<u8>),
    /// Sending `out` from `at`.
    Answer { out: Vec<u8>, at: usize },
}

struct Conn {
    stream: TcpStream,
    peer: IpAddr,
    /// When it was accepted (eviction order) and when its current state must end.
    since: Instant,
    deadline: Instant,
    state: State,
}

/// Serves `listener` forever with `handler`, within `limits`.
pub fn serve<H>(listener: TcpListener, limits: Limits, handler: H) -> io::Result<()>
where
    H: FnMut(&Request) -> Response,
{
    Server::new(listener, limits)?.run(handler)
}

struct Server {
    poll: Poll,
    listener: MioListener,
    limits: Limits,
    conns: HashMap<Token, Conn>,
    next: usize,
    /// Connections per peer.
    peers: HashMap<IpAddr, usize>,
    /// Connections in the answering state.
    writers: usize,
    /// An accept failed for want of descriptors: retry soon rather than at the next readiness.
    accept_pending: bool,
}

impl Server {
    fn new(listener: TcpListener, limits: Limits) -> io::Result<Server> {
        listener.set_nonblocking(true)?;
        let mut listener = MioListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Server {
            poll,
            listener,
            limits,
            conns: HashMap::new(),
            next: 0,
            peers: HashMap::new(),
            writers: 0,
            accept_pending: false,
        })
    }

    fn run<H: FnMut(&Request) -> Response>(&mut self, mut handler: H) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            let now = Instant::now();
            let mut timeout = self
                .conns
                .values()
                .map(|c| c.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(60));
            if self.accept_pending {
                timeout = timeout.min(Duration::from_millis(20));
            }
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let mut ready: Vec<Token> = Vec::new();
            for ev in &events {
                if ev.token() == LISTENER {
                    self.accept_pending = true;
                } else {
                    ready.push(ev.token());
                }
            }
            if self.accept_pending {
                self.accept_all();
            }
            for t in ready {
                self.progress(t, &mut handler);
            }
            self.expire(Instant::now());
        }
    }

    /// Accepts until none is waiting (or descriptors run out).
    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, addr)) => self.admit(stream, addr.ip()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.accept_pending = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors (EMFILE, ENFILE), or a connection reset before it
                    // was accepted: free a descriptor if one is idle, retry shortly.
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        self.evict_oldest(|c| matches!(c.state, State::Head(_)));
                    }
                    return;
                }
            }
        }
    }

    fn admit(&mut self, mut stream: TcpStream, peer: IpAddr) {
        if self.peers.get(&peer).copied().unwrap_or(0) >= self.limits.per_peer
            && !self.evict_oldest(|c| c.peer == peer && matches!(c.state, State::Head(_)))
        {
            return; // every connection of this peer is being answered: refused (closed)
        }
        if self.conns.len() >= self.limits.connections
            && !self.evict_oldest(|c| matches!(c.state, State::Head(_)))
        {
            return;
        }
        let token = loop {
            self.next = self.next.wrapping_add(1) % (usize::MAX - 1);
            if !self.conns.contains_key(&Token(self.next)) {
                break Token(self.next);
            }
        };
        if self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE)
            .is_err()
        {
            return;
        }
        let now = Instant::now();
        *self.peers.entry(peer).or_default() += 1;
        self.conns.insert(
            token,
            Conn {
                stream,
                peer,
                since: now,
                deadline: now + self.limits.head_deadline,
                state: State::Head(Vec::new()),
            },
        );
    }

    /// Closes the oldest connection that `pick` accepts; false if there is none.
    fn evict_oldest(&mut self, pick: impl Fn(&Conn) -> bool) -> bool {
        let oldest = self
            .conns
            .iter()
            .filter(|(_, c)| pick(c))
            .min_by_key(|(_, c)| c.since)
            .map(|(t, _)| *t);
        match oldest {
            Some(t) => {
                self.close(t);
                true
            }
            None => false,
        }
    }

    fn close(&mut self, t: Token) {
        if let Some(mut c) = self.conns.remove(&t) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if matches!(c.state, State::Answer { .. }) {
                self.writers -= 1;
            }
            if let Some(n) = self.peers.get_mut(&c.peer) {
                *n -= 1;
                if *n == 0 {
                    self.peers.remove(&c.peer);
                }
            }
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// Reads or writes what connection `t` is ready for.
    fn progress<H: FnMut(&Request) -> Response>(&mut self, t: Token, handler: &mut H) {
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        if let State::Head(buf) = &mut c.state {
            match read_head(&mut c.stream, buf, self.limits.header_bytes) {
                Step::Wait => return,
                Step::Gone => return self.close(t),
                Step::Done(head) => {
                    let (resp, body) = match head {
                        Head::Get(req, is_head) => (handler(&req), !is_head),
                        Head::Answer(r) => (r, true),
                    };
                    self.start_answer(t, &resp, body);
                }
            }
        }
        self.write(t);
    }

    fn start_answer(&mut self, t: Token, r: &Response, body: bool) {
        if self.writers >= self.limits.writers {
            self.evict_oldest(|c| matches!(c.state, State::Answer { .. }));
        }
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        let mut out = answer_head(r).into_bytes();
        if body {
            out.extend_from_slice(&r.body);
        }
        c.state = State::Answer { out, at: 0 };
        c.deadline = Instant::now() + self.limits.write_deadline;
        self.writers += 1;
        let _ = self
            .poll
            .registry()
            .reregister(&mut c.stream, t, Interest::WRITABLE);
    }

    /// Sends what it can of connection `t`'s answer; closes it when all is sent.
    fn write(&mut self, t: Token) {
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        let State::Answer { out, at } = &mut c.state else {
            return;
        };
        while *at < out.len() {
            match c.stream.write(&out[*at..]) {
                Ok(0) => return self.close(t),
                Ok(n) => *at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(t),
            }
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        self.close(t);
    }

    /// Ends the connections past their deadline: a head too slow gets `408` if it fits in the
    /// socket at once, an answer too slow is cut off.
    fn expire(&mut self, now: Instant) {
        let late: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in late {
            if let Some(c) = self.conns.get_mut(&t)
                && matches!(c.state, State::Head(_))
            {
                let r = Response::text(408, "request head too slow\n");
                let mut out = answer_head(&r).into_bytes();
                out.extend_from_slice(&r.body);
                let _ = c.stream.write(&out);
            }
            self.close(t);
        }
    }
}

/// What a read from a connection reading its head gave.
enum Step {
    /// Nothing more to read now.
    Wait,
    /// The peer closed or failed before its head was complete.
    Gone,
    /// The head is complete (or refused).
    Done(Head),
}

/// What the head says.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// A GET (`false`) or HEAD (`true`).
    Get(Request, bool),
    /// An answer without the handler.
    Answer(Response),
}

fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>, cap: usize) -> Step {
    let mut chunk = [0u8; 2048];
    loop {
        if buf.len() >= cap {
            return Step::Done(Head::Answer(Response::text(
                431,
                "request head too large\n",
            )));
        }
        let want = chunk.len().min(cap - buf.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Step::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Step::Gone,
        }
        match parse_head(buf) {
            Ok(Some(h)) => return Step::Done(h),
            Ok(None) => {}
            Err(r) => return Step::Done(Head::Answer(r)),
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
        _ => "Error",
    }
}

fn answer_head(r: &Response) -> String {
    let allow = if r.status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    )
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

    #[test]
    fn connections_fit_the_descriptors() {
        let l = Limits::default().within_descriptors(1024);
        assert_eq!(l.connections, 256);
        assert!(l.per_peer <= l.connections);
        assert_eq!(
            Limits::default().within_descriptors(1 << 20).connections,
            512
        );
        assert_eq!(Limits::default().within_descriptors(8).connections, 16);
    }
}
