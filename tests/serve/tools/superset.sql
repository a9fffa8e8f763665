-- Superset on PostgreSQL: SQLAlchemy's dialect initialisation (the first connection of an
-- engine), then Superset's own statements for its database list and its query cancel.
-- Sources: github.com/sqlalchemy/sqlalchemy, lib/sqlalchemy/dialects/postgresql/base.py at tag
-- rel_2_1_9 (PGDialect._get_server_version_info, _get_default_schema_name,
-- _set_backslash_escapes, get_isolation_level); github.com/apache/superset,
-- superset/db_engine_specs/postgres.py at commit 007e4f5f4b4a4b08b24b1f2fc14bcf5abb16237d
-- (get_catalog_names, get_cancel_query_id, cancel_query with the pid of no session,
-- 2147483647, in place of {cancel_query_id}).
-- statement: version
select pg_catalog.version()
-- statement: current_schema
select current_schema()
-- statement: standard_conforming_strings
show standard_conforming_strings
-- statement: isolation_level
show transaction isolation level
-- statement: catalogs

SELECT datname FROM pg_database
WHERE datistemplate = false;
            
-- statement: backend_pid
SELECT pg_backend_pid()
-- statement: cancel_query
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='2147483647'
