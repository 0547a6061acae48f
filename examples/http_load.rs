//! A loopback HTTP load generator for `scripts/bench_query.sh`: N clients,
//! each on its own keep-alive connection, ask the paths of a file in turn
//! until M requests in all or S seconds, whichever comes first, then print
//! one JSON line: requests, non-200 answers, latency percentiles (ms) and
//! requests per second. The clients start evenly spread over the file
//! (client i of N at line i × lines / N), so that a first pass asks each
//! question once, not N clients the same question together (which a server
//! that keeps its answers answers once).
//!
//! Only `127.0.0.1`/`localhost`/`[::1]` addresses are accepted: it is for
//! measuring a server on this machine.
//!
//!   `http_load --address 127.0.0.1:PORT --paths FILE --clients N --requests M --seconds S`

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The options.
struct Options {
    address: SocketAddr,
    paths: Vec<String>,
    clients: usize,
    requests: u64,
    seconds: u64,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut address, mut paths, mut clients, mut requests, mut seconds) =
        (None, None, 16, 10_000, 30);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--address" => {
                address = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|e| format!("--address {value}: {e}"))?,
                );
            }
            "--paths" => {
                let text =
                    std::fs::read_to_string(&value).map_err(|e| format!("--paths {value}: {e}"))?;
                paths = Some(text.lines().map(str::to_owned).collect::<Vec<_>>());
            }
            "--clients" => clients = usize::try_from(number()?).map_err(|e| e.to_string())?,
            "--requests" => requests = number()?,
            "--seconds" => seconds = number()?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    let address = address.ok_or("--address is needed")?;
    if !address.ip().is_loopback() {
        return Err(format!("{address} is not a loopback address"));
    }
    let paths = paths.filter(|p| !p.is_empty()).ok_or("--paths: no path")?;
    if clients == 0 || requests == 0 || seconds == 0 {
        return Err("--clients, --requests and --seconds must be positive".to_owned());
    }
    Ok(Options {
        address,
        paths,
        clients,
        requests,
        seconds,
    })
}

/// One GET on a keep-alive connection: the status, the body read whole.
fn get(stream: &mut BufReader<TcpStream>, address: SocketAddr, path: &str) -> std::io::Result<u16> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.get_mut().write_all(request.as_bytes())?;
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
    let mut length = 0usize;
    loop {
        line.clear();
        if stream.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("connection closed in the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value
                .trim()
                .parse()
                .map_err(|e| std::io::Error::other(format!("content-length: {e}")))?;
        }
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    Ok(status)
}

/// One client: its latencies in microseconds, and its non-200 answers.
fn client(
    options: &Options,
    first: usize,
    issued: &AtomicU64,
    deadline: Instant,
) -> std::io::Result<(Vec<u64>, u64)> {
    let mut stream = BufReader::new(TcpStream::connect(options.address)?);
    stream.get_ref().set_nodelay(true)?;
    let (mut latencies, mut failed) = (Vec::new(), 0);
    let mut next = first;
    while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < options.requests {
        let path = &options.paths[next % options.paths.len()];
        next += 1;
        let start = Instant::now();
        let status = get(&mut stream, options.address, path)?;
        latencies.push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
        if status != 200 {
            failed += 1;
        }
    }
    Ok((latencies, failed))
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(options) => Arc::new(options),
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "http_load: {why}");
            return std::process::ExitCode::from(2);
        }
    };
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(options.seconds);
    let clients: Vec<_> = (0..options.clients)
        .map(|i| {
            let (options, issued) = (Arc::clone(&options), Arc::clone(&issued));
            let first = i * options.paths.len() / options.clients;
            std::thread::spawn(move || client(&options, first, &issued, deadline))
        })
        .collect();
    let (mut latencies, mut failed) = (Vec::new(), 0u64);
    for handle in clients {
        match handle.join() {
            Ok(Ok((mine, not_ok))) => {
                latencies.extend(mine);
                failed += not_ok;
            }
            Ok(Err(e)) => {
                let _ = writeln!(std::io::stderr(), "http_load: a client failed: {e}");
                return std::process::ExitCode::from(1);
            }
            Err(_) => return std::process::ExitCode::from(1),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let pick = |q: f64| {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a rank within the list's length"
        )]
        let rank = ((latencies.len() as f64) * q) as usize;
        latencies
            .get(rank.min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |&us| us as f64 / 1000.0)
    };
    let _ = writeln!(
        std::io::stdout(),
        "{{\"requests\": {}, \"not_ok\": {failed}, \"p50\": {:.2}, \"p95\": {:.2}, \
         \"p99\": {:.2}, \"max\": {:.2}, \"per_s\": {:.1}, \"seconds\": {elapsed:.2}}}",
        latencies.len(),
        pick(0.50),
        pick(0.95),
        pick(0.99),
        pick(1.0),
        latencies.len() as f64 / elapsed,
    );
    std::process::ExitCode::SUCCESS
}
