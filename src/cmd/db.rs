//! `pgnload db …`: migrations and the embedded cluster's lifecycle.

use crate::{
    cmd::ExitStatus,
    config::Settings,
    db::{self, Target},
    embedded::{ClusterStatus, EmbeddedCluster},
    error::Error,
};

/// `pgnload db` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DbCommand {
    /// Apply pending migrations from sql/ (imports do this automatically).
    Migrate,
    /// Start the embedded cluster and keep it running (for psql) until `db stop`.
    Start,
    /// Stop the embedded cluster.
    Stop,
    /// Say whether the embedded cluster is initialized and running.
    Status,
    /// Print a connection URL for psql (`psql "$(pgnload db url)"`).
    Url,
}

fn embedded(settings: &Settings) -> Result<EmbeddedCluster, Error> {
    match settings.target() {
        Target::Embedded(dir) => Ok(EmbeddedCluster::new(dir)?),
        Target::Url(_) => Err(Error::Config(
            "this command manages the embedded cluster; unset --database-url / DATABASE_URL".into(),
        )),
    }
}

/// Runs a `pgnload db` subcommand.
pub fn run(command: &DbCommand, settings: &Settings) -> Result<ExitStatus, Error> {
    match command {
        DbCommand::Migrate => {
            let runtime = db::runtime()?;
            runtime.block_on(async {
                let mut database = db::connect(&settings.target()).await?;
                let applied = db::migrate(&mut database.client).await?;
                if applied.is_empty() {
                    println!("schema up to date ({})", database.description);
                } else {
                    for name in applied {
                        println!("applied {name}");
                    }
                }
                database.close()
            })?;
        }
        DbCommand::Start => {
            let cluster = embedded(settings)?;
            cluster.start_persistent()?;
            println!(
                "running; connect with: psql \"{}\"",
                cluster.connection_url()
            );
        }
        DbCommand::Stop => {
            embedded(settings)?.stop()?;
            println!("stopped");
        }
        DbCommand::Status => {
            let cluster = embedded(settings)?;
            match cluster.status()? {
                ClusterStatus::NotInitialized => {
                    println!("not initialized ({})", cluster.data_dir().display());
                }
                ClusterStatus::Stopped => println!("stopped ({})", cluster.data_dir().display()),
                ClusterStatus::Running { pid } => println!(
                    "running, pid {pid} ({}); psql \"{}\"",
                    cluster.data_dir().display(),
                    cluster.connection_url()
                ),
            }
        }
        DbCommand::Url => println!("{}", embedded(settings)?.connection_url()),
    }
    Ok(ExitStatus::Clean)
}
