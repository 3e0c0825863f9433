//! Slow and greedy clients: connections that never finish their headers or their body are closed
//! after the configured timeouts, a body larger than the limit is refused before it is read, the
//! number of connections is capped, and streamed answers are not held back by Nagle's algorithm.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentloop::Agent;
use agentloop_server::{Server, ServerConfig};
use agentloop_testkit::{ScriptedModel, Turn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `Server` on 127.0.0.1:0 serving until the returned sender is dropped.
async fn start(config: ServerConfig) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run_until(async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

fn config() -> ServerConfig {
    let model = ScriptedModel::from_fn(|_, _| Turn::text("Hello there."));
    ServerConfig::new(Agent::builder(model).build()).in_memory_database()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Read until the server closes the connection; what it sent, or `None` when it stays open
/// past `limit`.
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&received).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_connections_are_closed_and_others_are_still_served() {
    let (addr, _stop) = start(
        config()
            .header_read_timeout(Duration::from_secs(1))
            .body_read_timeout(Duration::from_secs(1)),
    )
    .await;

    let mut slow = Vec::new();
    for i in 0..50 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let sent: &[u8] = match i % 3 {
            // Headers that never end.
            0 => b"GET /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
            // A body that never ends.
            1 => b"POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"messa",
            // Nothing at all.
            _ => b"",
        };
        stream.write_all(sent).await.unwrap();
        slow.push(stream);
    }

    let started = Instant::now();
    let response = client()
        .get(format!("http://{addr}/v1/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a normal request took {:?} beside 50 half-sent connections",
        started.elapsed()
    );

    for (i, stream) in slow.iter_mut().enumerate() {
        let closed = read_to_close(stream, Duration::from_secs(10)).await;
        let Some(received) = closed else {
            panic!("half-sent connection {i} is still open 10 s after a 1 s timeout");
        };
        if i % 3 == 1 {
            // The handler was reading the body: it gets an error answer, then the close.
            assert!(received.starts_with("HTTP/1.1 4"), "{received}");
            assert!(received.contains("not received within"), "{received}");
        }
    }
}

#[tokio::test]
async fn a_body_larger_than_the_limit_is_refused_before_it_is_read() {
    let (addr, _stop) = start(config().max_body_bytes(1024)).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n{\"mess",
        )
        .await
        .unwrap();
    let received = read_to_close(&mut stream, Duration::from_secs(10))
        .await
        .expect("the server answers and closes without waiting for the body");
    assert!(
        received.starts_with("HTTP/1.1 413"),
        "expected 413, got: {received}"
    );
    assert!(received.contains("1024 bytes"), "{received}");
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let (addr, _stop) = start(config().max_connections(2)).await;
    // Two idle connections fill the cap.
    let first = TcpStream::connect(addr).await.unwrap();
    let second = TcpStream::connect(addr).await.unwrap();
    let waiting = tokio::spawn(async move {
        client()
            .get(format!("http://{addr}/v1/conversations"))
            .send()
            .await
            .map(|r| r.status())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection was served while two held the cap of 2"
    );
    drop(first);
    let status = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting connection is served once a slot frees")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    drop(second);
}

/// The server's end of the connection `client` made to `server`: this test process holds both.
fn server_side(server: SocketAddr, client: SocketAddr) -> std::os::fd::BorrowedFd<'static> {
    use nix::sys::socket::{SockaddrStorage, getpeername, getsockname};
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = entry.unwrap().file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let ends = getsockname::<SockaddrStorage>(fd)
            .ok()
            .zip(getpeername::<SockaddrStorage>(fd).ok());
        let Some((local, peer)) = ends else { continue };
        let (Some(local), Some(peer)) = (local.as_sockaddr_in(), peer.as_sockaddr_in()) else {
            continue;
        };
        if SocketAddr::from(std::net::SocketAddrV4::from(*local)) == server
            && SocketAddr::from(std::net::SocketAddrV4::from(*peer)) == client
        {
            // SAFETY: the descriptor is the server's socket of a connection the test keeps
            // open (its client end lives until the end of the test), so it stays valid.
            return unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        }
    }
    panic!("no socket of this process connects {server} to {client}");
}

#[tokio::test]
async fn accepted_connections_have_tcp_nodelay() {
    // Without TCP_NODELAY each small write of a streamed answer can wait for the client's
    // delayed ACK of the previous one.
    let (addr, _stop) = start(config()).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let server = server_side(addr, stream.local_addr().unwrap());
    let nodelay =
        nix::sys::socket::getsockopt(&server, nix::sys::socket::sockopt::TcpNoDelay).unwrap();
    assert!(nodelay, "the accepted socket does not have TCP_NODELAY");
    drop(stream);
}
