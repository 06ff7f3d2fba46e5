//! Why a simulation could not run: a bad scenario, manifests the simulated world cannot hold,
//! or output that could not be written.

use joiner_controller::ControllerError;
use joiner_controller::store::StoreError;
use joiner_model::duration::DurationError;

/// An error of `joiner simulate`. Each says what went wrong in the words of the input (the
/// scenario step, the Deployment, the file); [`Error::Context`] says what was being done, with
/// the cause as its source, so a caller printing the whole chain reads
/// `scenario step 3 at 08:00:00: no Deployment lab in the manifests`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scenario asks for something the input does not have or cannot do.
    #[error("{0}")]
    Invalid(String),
    /// What was being done when `source` happened.
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
    /// The controller core refused the settings or the cluster (printed whole, as the core
    /// words it: its own causes are already in its message).
    #[error("{0}")]
    Controller(ControllerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<ControllerError> for Error {
    fn from(e: ControllerError) -> Self {
        Error::Controller(e)
    }
}

/// Adds what was being done to an error, as its context.
pub(crate) trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|e| Error::Context {
            context: what(),
            source: Box::new(e.into()),
        })
    }
}

/// Builds an [`Error::Invalid`] from a format string.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::error::Error::Invalid(format!($($arg)*))
    };
}
pub(crate) use invalid;
