-- Grafana's PostgreSQL data source: the version query its configuration page runs, then the
-- table and column listing of its query builder.
-- Source: github.com/grafana/grafana,
-- public/app/plugins/datasource/grafana-postgresql-datasource/postgresMetaQuery.ts at commit
-- 12f912ab8d010f4d95a4043a0efaa20fc4ca0100 (getVersion, getTimescaleDBVersion, showTables()
-- without a schema as datasource.ts fetchTables calls it, getSchema('qa')), with the template
-- literals expanded: buildSchemaConstraint() inlined and the table name 'qa' quoted as getSchema
-- quotes it.
-- statement: version
SELECT current_setting('server_version_num')::int/100 as version
-- statement: timescaledb_version
SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'
-- statement: tables
SELECT
    CASE WHEN 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          ) THEN 0 ELSE 1 END, 1
-- statement: columns
SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('qa'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('qa'))[1]
          AND quote_ident(table_name) = (parse_ident('qa'))[2]
        ELSE quote_ident(table_name) = 'qa'
          AND 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )
      END
