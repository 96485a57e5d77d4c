//! Real servers on 127.0.0.1, started (and killed, and restarted) by the
//! tests themselves, from the distribution's binaries.
//!
//! Without the binaries a test says `skipped` and passes, so that a new
//! clone's `cargo test --workspace` stays green; with `BACKSTOP_REAL_SERVERS`
//! set (as `.ci/run` sets it, having installed them) a server that cannot
//! be started fails the test instead.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Set: the real-server tests must run.
const REQUIRED: &str = "BACKSTOP_REAL_SERVERS";

/// `None`, after saying why the test is skipped; a panic instead when the
/// tests are required to run.
fn skip<T>(what: &str, why: &str) -> Option<T> {
    assert!(
        std::env::var_os(REQUIRED).is_none(),
        "{what}: {why} ({REQUIRED} is set: the real-server tests must run)"
    );
    eprintln!("skipped: {what}: {why}");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port`, within `within`:
/// a refused connection is retried by the crate's own loop (a server
/// starting up refuses; nothing was sent), backing off from 5 ms to 50 ms.
fn accepting(port: u16, within: Duration) -> bool {
    let policy = backstop::Policy::new()
        .attempts(u32::MAX)
        .base(Duration::from_millis(5))
        .cap(Duration::from_millis(50))
        .deadline(Some(within))
        .no_budget();
    backstop::call(&policy, || TcpStream::connect(("127.0.0.1", port))).is_ok()
}

/// `name` found on `PATH` or in `dirs`. (Not resolved: `redis-server` is a
/// link to a binary that reads its name to know what to be.)
fn find(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(dirs.iter().cloned())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A fresh directory of this process's.
fn scratch(what: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "backstop-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// PostgreSQL refuses to run as root: as root, its commands run as the
/// `postgres` user the distribution's package makes (or `nobody`).
struct ServerUser(Option<&'static str>);

impl ServerUser {
    fn new() -> Self {
        if !is_root() {
            return Self(None);
        }
        let exists = |user: &str| {
            Command::new("id")
                .arg(user)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        Self(Some(if exists("postgres") {
            "postgres"
        } else {
            "nobody"
        }))
    }

    fn command(&self, program: &Path) -> Command {
        match self.0 {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn owns(&self, dir: &Path) {
        if let Some(user) = self.0 {
            let status = Command::new("chown")
                .arg("-R")
                .arg(user)
                .arg(dir)
                .status()
                .unwrap();
            assert!(status.success(), "chown {user} {}", dir.display());
        }
    }
}

/// A PostgreSQL cluster of its own: `initdb` in a scratch directory, the
/// server on a free port of 127.0.0.1, trust authentication for user
/// `postgres`.
pub(crate) struct Postgres {
    bin: PathBuf,
    root: PathBuf,
    user: ServerUser,
    pub(crate) port: u16,
}

impl Postgres {
    pub(crate) fn start(what: &str) -> Option<Self> {
        let mut dirs = Vec::new();
        if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
            dirs.extend(versions.flatten().map(|v| v.path().join("bin")));
        }
        let Some(initdb) = find("initdb", &dirs) else {
            return skip(what, "no PostgreSQL server binaries (initdb)");
        };
        // (`/usr/local/bin/initdb` may be a link into the version's own
        // directory, where `pg_ctl` finds `postgres`.)
        let initdb = initdb.canonicalize().unwrap();
        let bin = initdb.parent().unwrap().to_owned();
        let root = scratch("postgres");
        let user = ServerUser::new();
        user.owns(&root);
        let status = user
            .command(&initdb)
            .arg("-D")
            .arg(root.join("data"))
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        let server = Self {
            bin,
            root,
            user,
            port: free_port(),
        };
        server.up();
        Some(server)
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        self.user
            .command(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.root.join("data"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// Starts the server and waits until it accepts connections.
    pub(crate) fn up(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40",
            self.port,
            self.root.display()
        );
        let log = self.root.join("log").display().to_string();
        assert!(
            self.pg_ctl(&["-w", "-t", "30", "-l", &log, "-o", &options, "start"]),
            "pg_ctl start failed: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(accepting(self.port, Duration::from_secs(10)));
    }

    /// Stops the server at once, as a crash would (`-m immediate`): the
    /// next start recovers from its log.
    pub(crate) fn crash(&self) {
        assert!(self.pg_ctl(&["-w", "-m", "immediate", "stop"]));
    }

    pub(crate) fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=2",
            self.port
        )
    }

    /// The server as a URL (sqlx's form).
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.pg_ctl(&["-w", "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A Redis server of its own, on a free port of 127.0.0.1, writing every
/// write to its append-only file before answering (`appendfsync always`),
/// so that a killed server comes back with every write it acknowledged.
pub(crate) struct Redis {
    binary: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    pub(crate) port: u16,
}

impl Redis {
    pub(crate) fn start(what: &str) -> Option<Self> {
        let dirs = [PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")];
        let Some(binary) = find("redis-server", &dirs) else {
            return skip(what, "no Redis server binary (redis-server)");
        };
        let mut server = Self {
            binary,
            dir: scratch("redis"),
            child: None,
            port: free_port(),
        };
        server.up();
        Some(server)
    }

    pub(crate) fn up(&mut self) {
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--logfile")
            .arg(self.dir.join("log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        assert!(
            accepting(self.port, Duration::from_secs(10)),
            "redis-server did not start: {}",
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }

    /// Kills the server (`SIGKILL`).
    pub(crate) fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.crash();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
