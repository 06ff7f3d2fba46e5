//! A loopback HTTP server that answers as kube-apiserver would from recorded responses, for
//! tests of the commands that read a cluster (`joiner plan --kubeconfig`).
//!
//! A request `GET /api/v1/pods?limit=500` is answered with the file `<root>/api/v1/pods.json`;
//! one carrying `continue=<token>` with `<root>/api/v1/pods.<token>.json`. A file holding a
//! `Status` is answered with that status's `code` (403 for a kind RBAC refuses, say); a path
//! with no file gets the 404 a server gives for a resource it does not serve. A file
//! `<name>.first.json` beside `<name>.json` answers the first such request only (a continue
//! token that expired once, say: 410). Anything but GET
//! is refused with 405: the clients under test promise to read only, and every request is kept
//! for the test to check.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The query's parameters, percent-decoded, in the order sent.
    pub query: Vec<(String, String)>,
}

impl Request {
    /// The value of a query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The server; it answers until the test process ends.
pub struct RecordedApiServer {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl RecordedApiServer {
    /// Serves the responses under `root` on a free loopback port.
    pub fn start(root: &Path) -> RecordedApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let url = format!(
            "http://{}",
            listener.local_addr().expect("the bound address")
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            root: root.to_path_buf(),
            log: Arc::clone(&requests),
            answered_first: Mutex::new(HashSet::new()),
        });
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&state);
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        RecordedApiServer { url, requests }
    }

    /// The server's URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Writes a kubeconfig naming this server (context `recorded`, a bearer token) to `path`.
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: recorded\n  cluster:\n    server: {}\n\
             contexts:\n- name: recorded\n  context:\n    cluster: recorded\n    user: jane\n\
             current-context: recorded\nusers:\n- name: jane\n  user:\n    token: recorded-token\n",
            self.url
        );
        std::fs::write(path, text).expect("writing the kubeconfig");
    }
}

/// What the connections share.
struct State {
    root: PathBuf,
    log: Arc<Mutex<Vec<Request>>>,
    /// The `.first.json` files already answered.
    answered_first: Mutex<HashSet<PathBuf>>,
}

/// Answers the requests of one connection until the client closes it.
fn serve(stream: TcpStream, state: &State) {
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = parse(&line);
        let (code, answer) = answer(state, &request);
        if let Ok(mut log) = state.log.lock() {
            log.push(request);
        }
        let head = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            reason(code),
            answer.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&answer).is_err() {
            return;
        }
    }
}

fn parse(line: &str) -> Request {
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    Request {
        method,
        path: path.to_string(),
        query,
    }
}

/// Percent-decoding, enough for field selectors and continue tokens.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn answer(state: &State, request: &Request) -> (u16, Vec<u8>) {
    if request.method != "GET" {
        return status(
            405,
            "MethodNotAllowed",
            "this recorded server answers reads only",
        );
    }
    let relative = request.path.trim_start_matches('/');
    if relative.contains("..") {
        return status(400, "BadRequest", "no such path");
    }
    let name = match request.param("continue") {
        Some(token) => format!("{relative}.{token}"),
        None => relative.to_string(),
    };
    let first = state.root.join(format!("{name}.first.json"));
    let first_time = first.exists()
        && state
            .answered_first
            .lock()
            .is_ok_and(|mut answered| answered.insert(first.clone()));
    let file = if first_time {
        first
    } else {
        state.root.join(format!("{name}.json"))
    };
    match std::fs::read(&file) {
        Ok(body) => {
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .filter(|v| v["kind"] == "Status")
                .and_then(|v| v["code"].as_u64())
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(200);
            (code, body)
        }
        Err(_) => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Vec<u8>) {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": {}, "code": code,
    });
    (code, body.to_string().into_bytes())
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        _ => "Error",
    }
}
