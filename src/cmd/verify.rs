//! `pgnload verify`: placeholder.

/// Options of `pgnload verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {}

/// Runs `pgnload verify`.
pub fn run(
    _args: &VerifyArgs,
    _settings: &crate::config::Settings,
    _quiet: bool,
) -> crate::Result<super::ExitStatus> {
    Err(crate::Error::Config("verify is not implemented yet".into()))
}
