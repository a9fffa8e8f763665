-- DBeaver (and CloudBeaver) on PostgreSQL: connecting, then opening the navigator down to a
-- table's columns, with the default connection settings.
-- Source: github.com/dbeaver/dbeaver at commit 2428359b748778a5a345432906ab3da69289c20c
-- (24.2.3 and 21 commits), plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/
-- postgresql/model/: PostgreDataSource.java (SELECT version(), the database list with
-- datallowconn / NOT datistemplate / the connection's database name), PostgreExecutionContext.java
-- (the context defaults), PostgreDatabase.java SchemaCache, PostgreDataTypeCache.java (types of
-- a schema, PostgreSQL 10+, "read all data types" off), PostgreSchema.java TableCache (the
-- relations and the columns of a schema, PostgreSQL 10+). The StringBuilders are concatenated as
-- they are for those settings; pgJDBC sends each ? as $n. A parameter given as {"sql": ...} is
-- the value that query returns (the OID DBeaver read from the schema list).
-- statement: version
SELECT version()
-- statement: databases
-- params: ["evals"]
SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE 1 = 1 AND datallowconn AND NOT datistemplate OR db.datname =$1
ORDER BY db.datname
-- statement: context_defaults
SELECT current_schema(),session_user
-- statement: schemas
SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass
 ORDER BY nspname
-- statement: types
-- params: [{"sql": "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'pg_catalog'"}]
SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description
FROM pg_catalog.pg_type t
LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem 
LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid
WHERE t.typname IS NOT NULL
AND (c.relkind IS NULL OR c.relkind = 'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C')
AND t.typnamespace=$1 
-- statement: tables
-- params: [{"sql": "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'public'"}]
SELECT c.oid,c.*,d.description,pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,  pg_catalog.pg_get_partkeydef(c.oid) as partition_key 
FROM pg_catalog.pg_class c
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass
WHERE c.relnamespace=$1 AND c.relkind not in ('i','I','c')
-- statement: columns
-- params: [{"sql": "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'public'"}]
SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description,dep.objid
FROM pg_catalog.pg_attribute a
INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
LEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid
WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.relnamespace=$1
ORDER BY a.attnum
