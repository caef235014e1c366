# Recipe: snowflake IDs from Ruby with ActiveRecord 6.1 (Debian's
# ruby-activerecord, with ruby-pg), standalone (no Rails application), as the
# application role. Run with PGHOST, PGPORT, PGUSER, PGDATABASE set (the role
# must be able to create a database: the schema dump is loaded into one of
# its own):
#
#   ruby active_record.rb
#
# What ActiveRecord 6.1 does, read in rails/rails 6-1-stable:
#   - postgresql/database_statements.rb, sql_for_insert: every INSERT of a
#     model gets RETURNING "id", whatever the key's default is, and a nil key
#     is left out of the INSERT, so the database's default fills it; the key
#     is read back from the result (an int8, decoded into an Integer, which
#     holds any 64-bit value).
#   - insert_all.rb: insert_all returns the primary keys by default
#     (`returning:` names more).
#   - postgresql/schema_dumper.rb with abstract/schema_dumper.rb: a key whose
#     default is a function call (not a nextval of a sequence) is dumped as
#     `id: :bigint, default: -> { "snowflake_nextval()" }`, and
#     `enable_extension "snowflake_id"` is dumped from pg_extension.
#   - activesupport core_ext/object/json.rb: Integer#as_json is the integer
#     itself, so to_json writes every digit; a JavaScript client reading that
#     JSON rounds it: IDs for browsers are written as strings.
#
# Prints what it checked and "OK ruby", or "FAIL ruby: ..." and exits 1.

require "logger"
require "json"
require "stringio"
require "active_record"

def check(ok, what)
  return if ok
  puts "FAIL ruby: #{what}"
  exit 1
end

DB = ENV.fetch("PGDATABASE")
CONNECTION = { adapter: "postgresql", host: ENV["PGHOST"], port: ENV["PGPORT"], username: ENV["PGUSER"] }.freeze
SCRATCH = "#{DB}_ar_#{Process.pid}"

# #region guide:ar-migration
class CreateItems < ActiveRecord::Migration[6.1]
  def change
    enable_extension "snowflake_id"
    create_table :ar_items, id: :bigint, default: -> { "snowflake_nextval()" } do |t|
      t.string :name, null: false, index: { unique: true }
    end
    create_table :ar_parts, id: :bigint, default: -> { "snowflake_nextval()" } do |t|
      t.references :ar_item, null: false, foreign_key: true
      t.string :name, null: false
    end
  end
end

class ArItem < ActiveRecord::Base
  has_many :ar_parts
  # For browsers: the ID as a string (a JavaScript Number rounds it).
  def as_json(options = nil)
    super.merge("id" => id.to_s)
  end
end

class ArPart < ActiveRecord::Base
  belongs_to :ar_item
end
# #endregion

ActiveRecord::Base.establish_connection(CONNECTION.merge(database: DB))
ActiveRecord::Migration.verbose = false
conn = ActiveRecord::Base.connection
check(ActiveRecord::VERSION::STRING.start_with?("6.1."), "ActiveRecord #{ActiveRecord::VERSION::STRING}, not 6.1")
check(!conn.table_exists?("ar_items") && !conn.table_exists?("ar_parts"), "ar_items or ar_parts exists already")
created = false
begin
  CreateItems.migrate(:up)
  created = true
  layout = conn.select_value("SELECT current_setting('snowflake_id.layout')")

  # #region guide:ar-use
  item = ArItem.create!(name: "first")                      # item.id: the row's key
  ids = ArItem.insert_all((0...100).map { |i| { name: "item #{i}" } }).rows.flatten
  parts = item.ar_parts.create!([{ name: "a" }, { name: "b" }])
  found = ArItem.find(parts.first.ar_item_id)
  # #endregion

  truth = conn.select_rows("SELECT name, id::text FROM ar_items").to_h
  check(item.id.to_s == truth["first"], "create!: #{item.id}, the server's #{truth['first']}")
  check(ids.size == 100 && ids.uniq.size == 100, "insert_all returned #{ids.size} keys")
  by_key = conn.select_rows("SELECT id::text, name FROM ar_items").to_h
  check(ids.all? { |i| by_key.key?(i.to_s) }, "insert_all: a key that is no row's")
  check(found.name == "first", "find by a part's ar_item_id found #{found.name}")
  stored = conn.select_rows("SELECT name, id::text, ar_item_id::text FROM ar_parts").to_h { |n, i, f| [n, [i, f]] }
  check(parts.all? { |p| stored[p.name] == [p.id.to_s, item.id.to_s] }, "a part's key or foreign key is not the server's")
  check((item.id > 2**53) == (layout != "js53"), "the IDs are not where the layout puts them")
  puts "keys: create!, insert_all of 100, has_many through the foreign key: every key the server's (ActiveRecord #{ActiveRecord::VERSION::STRING})"

  # JSON: exact in Ruby; the model writes its ID as a string for browsers.
  agg = JSON.parse(conn.select_value("SELECT json_agg(i) FROM ar_items i"))
  check(agg.all? { |r| r["id"].to_s == truth[r["name"]] }, "json_agg parsed by Ruby changed an ID")
  check(JSON.parse(item.to_json)["id"] == truth["first"], "to_json: #{item.to_json}")
  check(JSON.parse({ id: item.id }.to_json)["id"].to_s == truth["first"], "a plain Integer in JSON changed")
  puts "JSON: json_agg parsed exactly; the model's to_json writes the ID as a string"

  # The schema dump keeps the default and the extension, and nothing of the
  # extension's own objects; loaded into a new database, it makes the same.
  # (Only this recipe's tables: other recipes leave theirs in this database.)
  ActiveRecord::SchemaDumper.ignore_tables = [/\A(?!ar_)/]
  # #region guide:ar-dump
  dump = StringIO.new
  ActiveRecord::SchemaDumper.dump(conn, dump)
  # #endregion
  schema = dump.string
  check(schema.include?('enable_extension "snowflake_id"'), "no enable_extension in:\n#{schema}")
  check(schema.include?('create_table "ar_items", id: :bigint, default: -> { "snowflake_nextval()" }'),
        "the key's default is not dumped:\n#{schema}")
  check(!schema.match?(/snowflake_claims|snowflake_status|snowflake_floors/), "the dump holds the extension's objects:\n#{schema}")
  # With the extension's schema on the search path, the dump would take its
  # table for the application's (ActiveRecord dumps the tables of
  # current_schemas): the guide says to keep it off.
  ActiveRecord::SchemaDumper.ignore_tables = []
  conn.schema_search_path = "public, snowflake_id"
  wide = StringIO.new
  ActiveRecord::SchemaDumper.dump(conn, wide)
  conn.schema_search_path = "public"
  check(wide.string.include?('create_table "snowflake_claims"'), "snowflake_id on the search path: the claims table is not dumped")
  ActiveRecord::SchemaDumper.ignore_tables = [/\A(?!ar_)/]
  conn.create_database(SCRATCH)
  ActiveRecord::Base.establish_connection(CONNECTION.merge(database: SCRATCH))
  eval(schema) # rubocop:disable Security/Eval -- the schema just dumped, as db:schema:load reads it
  loaded = ActiveRecord::Base.connection
  check(loaded.select_value("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'ar_items'::regclass") ==
        "snowflake_nextval()", "the loaded schema has another default")
  check(ArItem.create!(name: "loaded").id.to_s == loaded.select_value("SELECT id::text FROM ar_items"),
        "a row of the loaded schema")
  puts "schema.rb: enable_extension and the key's default dumped, none of the extension's objects; loaded again, the same"
ensure
  begin
    ActiveRecord::Base.establish_connection(CONNECTION.merge(database: DB))
    c = ActiveRecord::Base.connection
    c.execute("DROP TABLE ar_parts, ar_items") if created
    c.execute("DROP DATABASE IF EXISTS #{c.quote_table_name(SCRATCH)} WITH (FORCE)")
  rescue StandardError => e
    puts "cleanup: #{e.message}"
  end
end
puts "OK ruby"
