pub type ToSqlError = Box<dyn std::error::Error + Sync + Send>;
