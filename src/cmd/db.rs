//! `pgnload db …`: migrations and the embedded cluster's lifecycle.

use crate::{
    config::Settings,
    error::Error,
    error::ExitStatus,
    store::{
        db::{self, Target},
        embedded::{ClusterStatus, EmbeddedCluster},
    },
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
    let message = match command {
        DbCommand::Migrate => {
            let runtime = db::runtime()?;
            runtime.block_on(async {
                let mut database = db::connect(&settings.target()).await?;
                let applied = db::migrate(&mut database.client).await?;
                let message = if applied.is_empty() {
                    format!("schema up to date ({})", database.description)
                } else {
                    applied
                        .iter()
                        .map(|name| format!("applied {name}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                database.close()?;
                Ok::<_, Error>(message)
            })?
        }
        DbCommand::Start => {
            let cluster = embedded(settings)?;
            cluster.start_persistent()?;
            format!(
                "running; connect with: psql \"{}\"",
                cluster.connection_url()
            )
        }
        DbCommand::Stop => {
            embedded(settings)?.stop()?;
            "stopped".to_owned()
        }
        DbCommand::Status => {
            let cluster = embedded(settings)?;
            let dir = cluster.data_dir().display();
            match cluster.status()? {
                ClusterStatus::NotInitialized => format!("not initialized ({dir})"),
                ClusterStatus::Stopped => format!("stopped ({dir})"),
                ClusterStatus::Running { pid } => format!(
                    "running, pid {pid} ({dir}); psql \"{}\"",
                    cluster.connection_url()
                ),
            }
        }
        DbCommand::Url => embedded(settings)?.connection_url(),
    };
    super::print(&format!("{message}\n"))?;
    Ok(ExitStatus::Clean)
}
