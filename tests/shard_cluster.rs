//! `scripts/shard-cluster.sh` and the [`ShardCluster`] helper the sharded
//! layout's tests stand on: the servers it starts are really separate,
//! reachable at the URLs it prints, stop and restart when asked, and a
//! coordinator reaches a shard through `postgres_fdw`.

use std::{
    collections::HashSet,
    net::TcpListener,
    os::unix::fs::MetadataExt,
    process::{Command, Output},
};

use crate::common::{ShardCluster, psql_on, run, scratch_dir, shard_cluster_script, stderr};

/// The script with `args`.
fn script(args: &[&str]) -> Output {
    run({
        let mut c = shard_cluster_script();
        c.args(args);
        c
    })
}

/// The script on `cluster`'s directory.
fn script_on(cluster: &ShardCluster, command: &str) -> Output {
    let dir = cluster.dir.to_str().expect("scratch paths are UTF-8");
    script(&[command, dir])
}

/// Every URL of the cluster, coordinator first.
fn all_urls(cluster: &ShardCluster) -> Vec<String> {
    std::iter::once(cluster.coordinator_url.clone())
        .chain(cluster.shard_urls.iter().cloned())
        .collect()
}

/// The TCP port of a `postgresql://user@127.0.0.1:PORT/db` URL.
fn port_of(url: &str) -> u16 {
    url.strip_prefix("postgresql://postgres@127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/pgnload"))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("unexpected URL form {url}"))
}

/// What identifies the server behind `url` and the session it gave:
/// database, user, the port it answered on, and its cluster's system
/// identifier (unique per initdb).
fn identity(url: &str) -> String {
    psql_on(
        url,
        "SELECT current_database(), current_user, inet_server_port(), \
         (SELECT system_identifier FROM pg_control_system())",
    )
}

fn start_time(url: &str) -> String {
    psql_on(url, "SELECT pg_postmaster_start_time()")
}

/// Asserts the URLs reach distinct servers, each the `pgnload` database as
/// `postgres` on the URL's own port; returns their identities.
fn assert_distinct_servers(urls: &[String]) -> Vec<String> {
    let identities: Vec<String> = urls.iter().map(|u| identity(u)).collect();
    let mut systems = HashSet::new();
    for (url, id) in urls.iter().zip(&identities) {
        let fields: Vec<&str> = id.split('|').collect();
        assert_eq!(
            fields[..3],
            ["pgnload", "postgres", &port_of(url).to_string()],
            "{url}: {id}"
        );
        assert!(
            systems.insert(fields[3].to_owned()),
            "two URLs reach one cluster: {identities:?}"
        );
    }
    identities
}

/// psql on `url`, which must fail to connect because nothing listens.
fn assert_refused(url: &str) {
    let out = run({
        let mut c = Command::new("psql");
        c.args(["-X", "-A", "-t", url, "-c", "SELECT 1"]);
        c
    });
    assert!(!out.status.success(), "{url} still answers");
    assert!(
        stderr(&out).contains("Connection refused"),
        "{url}: {}",
        stderr(&out)
    );
}

#[test]
fn start_is_idempotent_stop_stops_and_a_restart_keeps_the_urls() {
    let cluster = ShardCluster::start("life", 2);
    let urls = all_urls(&cluster);
    assert_eq!(urls.len(), 3);
    for url in &urls {
        assert_eq!(psql_on(url, "SELECT 1"), "1", "{url}");
    }
    let identities = assert_distinct_servers(&urls);
    let started: Vec<String> = urls.iter().map(|u| start_time(u)).collect();

    // A second start changes nothing and prints what `url` prints.
    let again = script_on(&cluster, "start");
    assert!(again.status.success(), "{}", stderr(&again));
    let printed = script_on(&cluster, "url");
    assert!(printed.status.success(), "{}", stderr(&printed));
    assert_eq!(again.stdout, printed.stdout);
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout),
        format!(
            "coordinator={}\nshards={}\n",
            cluster.coordinator_url,
            cluster.shard_urls.join(",")
        )
    );
    let after: Vec<String> = urls.iter().map(|u| start_time(u)).collect();
    assert_eq!(after, started, "a second start restarted a server");

    let status = script_on(&cluster, "status");
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    for name in ["coordinator", "shard1", "shard2"] {
        assert!(text.contains(&format!("{name}: running")), "{text}");
    }

    let stop = script_on(&cluster, "stop");
    assert!(stop.status.success(), "{}", stderr(&stop));
    for url in &urls {
        assert_refused(url);
    }
    let stop_again = script_on(&cluster, "stop");
    assert!(stop_again.status.success(), "{}", stderr(&stop_again));
    let status = script_on(&cluster, "status");
    assert_eq!(
        status.status.code(),
        Some(3),
        "status with every server stopped"
    );
    assert_eq!(
        String::from_utf8_lossy(&status.stdout)
            .matches(": stopped")
            .count(),
        3,
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );

    // Started again: the same clusters (not new ones) on the same ports.
    let restart = script_on(&cluster, "start");
    assert!(restart.status.success(), "{}", stderr(&restart));
    assert_eq!(restart.stdout, printed.stdout);
    assert_eq!(assert_distinct_servers(&urls), identities);
}

#[test]
fn restart_shard_restarts_it_and_the_coordinator_reaches_a_shard_through_postgres_fdw() {
    let cluster = ShardCluster::start("fdw", 2);
    let shard = &cluster.shard_urls[1];
    let port = port_of(shard);
    psql_on(shard, "CREATE TABLE t (id int PRIMARY KEY, note text)");
    psql_on(
        &cluster.coordinator_url,
        &format!(
            "CREATE EXTENSION postgres_fdw; \
             CREATE SERVER shard2 FOREIGN DATA WRAPPER postgres_fdw \
               OPTIONS (host '127.0.0.1', port '{port}', dbname 'pgnload'); \
             CREATE USER MAPPING FOR CURRENT_USER SERVER shard2 OPTIONS (user 'postgres'); \
             CREATE FOREIGN TABLE t (id int, note text) SERVER shard2 OPTIONS (table_name 't'); \
             INSERT INTO t VALUES (1, 'through the coordinator'), (2, 'second')"
        ),
    );
    assert_eq!(
        psql_on(shard, "SELECT id, note FROM t ORDER BY id"),
        "1|through the coordinator\n2|second"
    );
    // Really on shard 2, not in a coordinator table of the same name.
    assert_eq!(
        psql_on(
            &cluster.coordinator_url,
            "SELECT relkind FROM pg_class WHERE relname = 't'"
        ),
        "f"
    );

    let before = [start_time(&cluster.shard_urls[0]), start_time(shard)];
    cluster.restart_shard(1);
    assert_eq!(
        start_time(&cluster.shard_urls[0]),
        before[0],
        "shard 1 was restarted"
    );
    assert_ne!(start_time(shard), before[1], "shard 2 was not restarted");
    // Committed rows survive the crash, and the coordinator reconnects.
    psql_on(
        &cluster.coordinator_url,
        "INSERT INTO t VALUES (3, 'after the restart')",
    );
    assert_eq!(psql_on(shard, "SELECT count(*) FROM t"), "3");
    assert_eq!(
        psql_on(
            &cluster.coordinator_url,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM t"
        ),
        "1,2,3"
    );
}

#[test]
fn taken_ports_are_skipped_and_concurrent_clusters_get_their_own() {
    // Both clusters try the same ports from `taken` up, which this test
    // holds: every server must get a port of its own all the same.
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let taken = holder.local_addr().expect("bound address").port();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| ShardCluster::start_with_port_base("porta", 1, Some(taken)));
        let b = s.spawn(|| ShardCluster::start_with_port_base("portb", 1, Some(taken)));
        (
            a.join().expect("cluster a started"),
            b.join().expect("cluster b started"),
        )
    });
    let urls: Vec<String> = all_urls(&a).into_iter().chain(all_urls(&b)).collect();
    let ports: HashSet<u16> = urls.iter().map(|u| port_of(u)).collect();
    assert_eq!(ports.len(), 4, "{urls:?}");
    assert!(
        !ports.contains(&taken),
        "{urls:?} use the taken port {taken}"
    );
    assert_distinct_servers(&urls);
}

#[test]
fn usage_errors_and_foreign_directories_are_refused_with_a_message() {
    let scratch = scratch_dir("pgnload-shards-usage-");
    let dir = scratch.path().to_str().expect("scratch paths are UTF-8");
    let usage: &[(&[&str], &str)] = &[
        (&[], "expected a command"),
        (&["start"], "expected a command"),
        (&["begin", dir], "unknown command 'begin'"),
        (&["start", dir, "0"], "N must be"),
        (&["start", dir, "x"], "N must be"),
        (&["start", dir, "100"], "N must be"),
        (&["start", dir, "2", "3"], "expected a command"),
        (&["start", ""], "DIR is empty"),
    ];
    for (args, message) in usage {
        let out = script(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("usage:"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let bad_base = run({
        let mut c = shard_cluster_script();
        c.args(["start", dir]).env("SHARD_CLUSTER_PORT_BASE", "80");
        c
    });
    assert_eq!(bad_base.status.code(), Some(2), "{}", stderr(&bad_base));
    assert!(
        stderr(&bad_base).contains("SHARD_CLUSTER_PORT_BASE"),
        "{}",
        stderr(&bad_base)
    );

    // Nothing was started in the empty directory: the other commands say so.
    for command in ["stop", "status", "url"] {
        let out = script(&[command, dir]);
        assert_eq!(out.status.code(), Some(1), "{command}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("run start first"),
            "{command}: {}",
            stderr(&out)
        );
    }
    let missing = format!("{dir}/missing");
    let out = script(&["url", &missing]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        !std::path::Path::new(&missing).exists(),
        "url created {missing}"
    );

    // A directory holding something else is neither used nor handed over.
    std::fs::write(scratch.path().join("precious"), "keep").expect("write a file");
    let owner = std::fs::metadata(scratch.path()).expect("stat").uid();
    let out = script(&["start", dir]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert_eq!(
        std::fs::metadata(scratch.path()).expect("stat").uid(),
        owner
    );
    let entries: Vec<_> = std::fs::read_dir(scratch.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(entries, ["precious"]);
}
