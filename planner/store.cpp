#include "planner/store.hpp"

#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <type_traits>

namespace stagecraft::planner {

namespace {

// 2: the plans' context parallelism (cp, cp_comm_type, cp_comm_s), added to a version-1 store
// when it is opened for writing (kMigrateV1)
// 3: their expert parallelism (ep, ep_comm_s), added to a version-1 or -2 store likewise (kMigrateV2)
constexpr int kSchemaVersion = 3;

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS searches (
  id INTEGER PRIMARY KEY,
  status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'interrupted')),
  version TEXT NOT NULL,
  started_at TEXT NOT NULL, updated_at TEXT NOT NULL, finished_at TEXT,
  inputs_hash TEXT NOT NULL, inputs TEXT NOT NULL,
  model TEXT NOT NULL, cluster TEXT NOT NULL, gpus INTEGER NOT NULL, global_batch INTEGER NOT NULL,
  top_k INTEGER NOT NULL,
  candidates INTEGER NOT NULL DEFAULT 0, dominated INTEGER NOT NULL DEFAULT 0,
  pruned_memory INTEGER NOT NULL DEFAULT 0, pruned_bound INTEGER NOT NULL DEFAULT 0,
  evaluated INTEGER NOT NULL DEFAULT 0, reused INTEGER NOT NULL DEFAULT 0, fitting INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS searches_by_inputs ON searches (inputs_hash);
CREATE TABLE IF NOT EXISTS plans (
  search_id INTEGER NOT NULL REFERENCES searches (id),
  key TEXT NOT NULL,
  tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL,
  micro_batch INTEGER NOT NULL, micro_batches INTEGER NOT NULL,
  schedule TEXT NOT NULL, virtual_stages INTEGER NOT NULL, sequence_parallel INTEGER NOT NULL,
  recompute TEXT NOT NULL, zero_stage INTEGER NOT NULL, offload TEXT NOT NULL, overlap_comm INTEGER NOT NULL,
  reduce_bucket INTEGER NOT NULL, prefetch_bucket INTEGER NOT NULL, max_live_parameters INTEGER NOT NULL,
  split TEXT NOT NULL,
  fits INTEGER NOT NULL, failed INTEGER NOT NULL,
  step_time_s REAL NOT NULL, tokens_per_s REAL NOT NULL, mfu REAL NOT NULL,
  model_tflops_per_gpu REAL NOT NULL, hardware_tflops_per_gpu REAL NOT NULL, bubble_fraction REAL NOT NULL,
  compute_s REAL NOT NULL, exposed_comm_s REAL NOT NULL, bubble_s REAL NOT NULL,
  tp_comm_s REAL NOT NULL, pp_comm_s REAL NOT NULL, dp_comm_s REAL NOT NULL,
  peak_memory_bytes INTEGER NOT NULL, peak_rank INTEGER NOT NULL,
  mem_params INTEGER NOT NULL, mem_grads INTEGER NOT NULL, mem_optimizer INTEGER NOT NULL,
  mem_activations INTEGER NOT NULL, mem_buffers INTEGER NOT NULL, mem_reserved INTEGER NOT NULL,
  capacity_bytes INTEGER NOT NULL, lower_bound_s REAL NOT NULL, memory_lower_bound_bytes INTEGER NOT NULL,
  plan TEXT NOT NULL, metrics TEXT NOT NULL, evaluated_at TEXT NOT NULL,
  cp INTEGER NOT NULL DEFAULT 1, cp_comm_type TEXT NOT NULL DEFAULT 'p2p', cp_comm_s REAL NOT NULL DEFAULT 0,
  ep INTEGER NOT NULL DEFAULT 1, ep_comm_s REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (search_id, key));
)sql";

// Version 1 to 2: the context-parallel columns, every earlier plan at cp 1.
const char* kMigrateV1 = R"sql(
ALTER TABLE plans ADD COLUMN cp INTEGER NOT NULL DEFAULT 1;
ALTER TABLE plans ADD COLUMN cp_comm_type TEXT NOT NULL DEFAULT 'p2p';
ALTER TABLE plans ADD COLUMN cp_comm_s REAL NOT NULL DEFAULT 0;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
)sql";

// Version 2 to 3: the expert-parallel columns, every earlier plan at ep 1.
const char* kMigrateV2 = R"sql(
ALTER TABLE plans ADD COLUMN ep INTEGER NOT NULL DEFAULT 1;
ALTER TABLE plans ADD COLUMN ep_comm_s REAL NOT NULL DEFAULT 0;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
)sql";

std::string now_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// SQL quoted in a message: the start and the end of it, not 600 characters of column names.
std::string shortened(const std::string& sql) {
  if (sql.size() <= 160) return sql;
  return sql.substr(0, 60) + " ... " + sql.substr(sql.size() - 90);
}

// A prepared statement; bind by 1-based index, step, read columns.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& file) : file_(file) {
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, &tail) != SQLITE_OK) {
      throw StoreError(file, std::string("cannot prepare \"") + shortened(sql) + "\": " + sqlite3_errmsg(db));
    }
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == ';' || *tail == '\t')) ++tail;
    if (tail && *tail) {
      sqlite3_finalize(stmt_);
      throw StoreError(file, "expected one SQL statement, got more: \"" + shortened(sql) + "\"");
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // True while a row is available.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw StoreError(file_, std::string("query failed: ") + sqlite3_errmsg(sqlite3_db_handle(stmt_)));
  }
  // Binds the next parameter (1, 2, ... since the last reset).
  template <typename T>
  Statement& add(const T& v) {
    return bind(++next_, v);
  }
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    next_ = 0;
  }
  int64_t integer(int c) const { return sqlite3_column_int64(stmt_, c); }
  double real(int c) const { return sqlite3_column_double(stmt_, c); }
  std::string text(int c) const {
    const unsigned char* t = sqlite3_column_text(stmt_, c);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  std::string file_;
  int next_ = 0;
};

Counts counts_from(const Statement& s, int first) {
  Counts c;
  c.candidates = s.integer(first);
  c.dominated = s.integer(first + 1);
  c.pruned_memory = s.integer(first + 2);
  c.pruned_bound = s.integer(first + 3);
  c.evaluated = s.integer(first + 4);
  c.reused = s.integer(first + 5);
  c.fitting = s.integer(first + 6);
  return c;
}

const char* kPlanColumns =
    "key, fits, failed, step_time_s, tokens_per_s, mfu, model_tflops_per_gpu, hardware_tflops_per_gpu, "
    "bubble_fraction, compute_s, exposed_comm_s, bubble_s, tp_comm_s, pp_comm_s, dp_comm_s, peak_memory_bytes, "
    "peak_rank, mem_params, mem_grads, mem_optimizer, mem_activations, mem_buffers, mem_reserved, capacity_bytes, "
    "plan, metrics, cp_comm_s, ep_comm_s";

// The Metrics columns in kPlanColumns order from column 1 (fits) to 23 (capacity_bytes): one
// list for reading a row back and for writing one.
template <typename M, typename F>
void metrics_columns(M& m, F&& f) {
  using trace::MemoryKind;
  f(m.fits), f(m.failed), f(m.step_time_s), f(m.tokens_per_s), f(m.mfu), f(m.model_tflops_per_gpu);
  f(m.hardware_tflops_per_gpu), f(m.bubble_fraction), f(m.time.compute_s), f(m.time.exposed_comm_s);
  f(m.time.bubble_s), f(m.time.tp_s), f(m.time.pp_s), f(m.time.dp_s), f(m.peak_memory_bytes), f(m.peak_rank);
  for (MemoryKind k : trace::kMemoryKinds) f(m.memory.by_kind[static_cast<std::size_t>(k)]);
  f(m.capacity_bytes);
}

Metrics metrics_from_row(const Statement& s) {
  Metrics m;
  int c = 0;
  metrics_columns(m, [&](auto& v) {
    ++c;
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, double>) v = s.real(c);
    else if constexpr (std::is_same_v<T, bool>) v = s.integer(c) != 0;
    else v = s.integer(c);
  });
  m.time.cp_s = s.real(26);   // after plan (24) and metrics (25)
  m.time.ep_s = s.real(27);
  return m;
}

}  // namespace

StoreError::StoreError(const std::string& file, const std::string& detail)
    : std::runtime_error(file + ": " + detail), file_(file) {}

namespace {

std::string uri_escaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void Store::open(const std::string& target, int flags) {
  if (sqlite3_open_v2(target.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(path_, "cannot open the results database: " + why);
  }
  sqlite3_busy_timeout(db_, 10000);
}

// The store's schema version, 0 for an empty database; refuses a database of something else and
// one written by a newer Stagecraft (whose columns this one would misread or damage).
int64_t Store::check_identity() {
  int64_t tables = 0;
  {
    Statement t(db_, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", path_);
    if (t.step()) tables = t.integer(0);
  }
  if (tables == 0) return 0;
  bool has_meta = false;
  {
    Statement t(db_, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", path_);
    has_meta = t.step() && t.integer(0) > 0;
  }
  std::string created_by, version;
  if (has_meta) {
    Statement s(db_, "SELECT key, value FROM meta WHERE key IN ('created_by', 'schema_version')", path_);
    while (s.step()) (s.text(0) == "created_by" ? created_by : version) = s.text(1);
  }
  if (created_by != "stagecraft" || version.empty()) {
    fail("not a Stagecraft results database (it holds " + std::to_string(tables) +
         " table(s) of something else); use a new file for --db");
  }
  char* end = nullptr;
  const long long v = std::strtoll(version.c_str(), &end, 10);
  if (end == version.c_str() || *end != '\0' || v < 1) fail("its schema_version \"" + version + "\" is not a version number");
  if (v > kSchemaVersion) {
    fail("written by a newer Stagecraft (schema version " + version + "; this one reads up to " +
         std::to_string(kSchemaVersion) + "); use that version, or a new file");
  }
  return v;
}

Store::Store(const std::string& path, bool read_only) : path_(path) {
  // A constructor that throws runs no destructor: close the connection on every way out.
  try {
    init(read_only);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

void Store::init(bool read_only) {
  const std::string& path = path_;
  if (read_only) {
    // A WAL database needs its -shm file even to read; in a read-only folder that cannot be made,
    // so open it as immutable there (nothing else may write it meanwhile, which holds for a
    // folder nobody can write).
    open(path, SQLITE_OPEN_READONLY);
    try {
      if ((schema_ = check_identity()) == 0) fail("not a Stagecraft results database (it is empty)");
    } catch (const StoreError&) {
      const int code = sqlite3_errcode(db_);
      if (code != SQLITE_CANTOPEN && code != SQLITE_READONLY) throw;
      sqlite3_close(db_);
      db_ = nullptr;
      open("file:" + uri_escaped(path) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
      if ((schema_ = check_identity()) == 0) fail("not a Stagecraft results database (it is empty)");
    }
    return;
  }
  open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  // Identity check, schema and meta rows in one write transaction: two processes opening a new
  // store at once take turns (the busy timeout), and neither sees the other's half-made schema
  // (which looked like "tables of something else").
  check_identity();  // refuses a foreign or newer file before taking any lock on it
  exec("BEGIN IMMEDIATE");
  try {
    const int found = check_identity();
    if (found == 1) exec(kMigrateV1);
    if (found >= 1 && found <= 2) exec(kMigrateV2);
    exec(kSchema);
    Statement meta(db_, "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?1), ('created_by', 'stagecraft')",
                   path_);
    meta.bind(1, std::to_string(kSchemaVersion));
    meta.step();
    exec("COMMIT");
    schema_ = kSchemaVersion;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  // Only now, on a file that is ours: WAL, so that readers never block the writer. Leaving
  // rollback mode needs the file to itself, and SQLite answers SQLITE_BUSY at once (without the
  // busy handler) while another connection reads it: retried for up to the busy timeout.
  for (int attempt = 0;; ++attempt) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, &error);
    const std::string why = error ? error : "";
    sqlite3_free(error);
    if (rc == SQLITE_OK) break;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || attempt >= 1000) fail(why);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  exec("PRAGMA synchronous = NORMAL");
}

Store::~Store() { sqlite3_close(db_); }

void Store::fail(const std::string& what) const { throw StoreError(path_, what); }

nlohmann::json Store::parse_column(const std::string& text, const char* column) const {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(std::string("a row's ") + column + " column is not JSON (a damaged store?)");
  return j;
}

void Store::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string why = error ? error : "unknown error";
    sqlite3_free(error);
    fail(why);
  }
}

std::string Store::hash(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int64_t Store::start_search(const nlohmann::json& inputs, const std::string& version, int64_t top_k, bool resume,
                            bool* resumed) {
  const std::string text = inputs.dump();
  const std::string h = hash(version + "\n" + text);
  *resumed = false;
  if (resume) {
    Statement s(db_, "SELECT id FROM searches WHERE inputs_hash = ?1 ORDER BY id DESC LIMIT 1", path_);
    s.bind(1, h);
    if (s.step()) {
      const int64_t id = s.integer(0);
      Statement u(db_, "UPDATE searches SET status = 'running', updated_at = ?2, finished_at = NULL WHERE id = ?1", path_);
      u.bind(1, id).bind(2, now_utc());
      u.step();
      *resumed = true;
      return id;
    }
  }
  Statement s(db_,
              "INSERT INTO searches (status, version, started_at, updated_at, inputs_hash, inputs, model, cluster, gpus, "
              "global_batch, top_k) VALUES ('running', ?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
              path_);
  s.bind(1, version).bind(2, now_utc()).bind(3, h).bind(4, text);
  s.bind(5, inputs.at("model").value("name", std::string())).bind(6, inputs.at("cluster").value("name", std::string()));
  s.bind(7, inputs.at("gpus").get<int64_t>()).bind(8, inputs.at("training").at("global_batch").get<int64_t>());
  s.bind(9, top_k);
  s.step();
  return sqlite3_last_insert_rowid(db_);
}

std::string Store::plan_columns() const {
  std::string c = kPlanColumns;
  if (schema_ < 2) c.replace(c.rfind("cp_comm_s"), 9, "0 AS cp_comm_s");
  if (schema_ < 3) c.replace(c.rfind("ep_comm_s"), 9, "0 AS ep_comm_s");
  return c;
}

std::unordered_map<std::string, Metrics> Store::load_metrics(int64_t search_id) {
  std::unordered_map<std::string, Metrics> out;
  Statement s(db_, "SELECT " + plan_columns() + " FROM plans WHERE search_id = ?1", path_);
  s.bind(1, search_id);
  while (s.step()) out.emplace(s.text(0), metrics_from_row(s));
  return out;
}

void Store::record(int64_t search_id, const std::vector<const Evaluated*>& rows, const Counts& counts, double seconds) {
  exec("BEGIN IMMEDIATE");
  try {
    Statement s(db_,
                "INSERT OR IGNORE INTO plans VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                "?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, "
                "?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43, ?44, ?45, ?46, ?47, ?48, ?49, ?50, ?51)",
                path_);
    const std::string at = now_utc();
    for (const Evaluated* e : rows) {
      const spec::Plan& p = e->plan;
      const Metrics& m = e->metrics;
      s.add(search_id).add(e->key).add(p.tp).add(p.pp).add(p.dp);
      s.add(p.micro_batch).add(p.micro_batches).add(std::string(spec::to_string(p.schedule)));
      s.add(p.virtual_stages).add(int64_t{p.sequence_parallel});
      s.add(std::string(spec::to_string(p.recompute))).add(int64_t{p.zero.stage});
      s.add(std::string(spec::to_string(p.zero.offload_optimizer))).add(int64_t{p.zero.overlap_comm});
      s.add(p.zero.reduce_bucket).add(p.zero.prefetch_bucket).add(p.zero.max_live_parameters);
      s.add(std::string(to_string(e->candidate.split)));
      metrics_columns(m, [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) s.add(v);
        else s.add(static_cast<int64_t>(v));
      });
      s.add(e->estimate.step_time_lb_s).add(e->estimate.memory_lb_bytes).add(spec::to_json(p).dump());
      s.add(to_json(m, p).dump()).add(at);
      s.add(p.cp).add(std::string(spec::to_string(p.cp_comm))).add(m.time.cp_s);
      s.add(p.ep).add(m.time.ep_s);
      s.step();
      s.reset();
    }
    Statement u(db_,
                "UPDATE searches SET updated_at = ?2, candidates = ?3, dominated = ?4, pruned_memory = ?5, "
                "pruned_bound = ?6, evaluated = ?7, reused = ?8, fitting = ?9, seconds = ?10 WHERE id = ?1",
                path_);
    u.bind(1, search_id).bind(2, now_utc()).bind(3, counts.candidates).bind(4, counts.dominated);
    u.bind(5, counts.pruned_memory).bind(6, counts.pruned_bound).bind(7, counts.evaluated).bind(8, counts.reused);
    u.bind(9, counts.fitting).bind(10, seconds);
    u.step();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void Store::finish(int64_t search_id, const std::string& status, const Counts& counts, double seconds) {
  record(search_id, {}, counts, seconds);
  Statement s(db_, "UPDATE searches SET status = ?2, finished_at = ?3 WHERE id = ?1", path_);
  s.bind(1, search_id).bind(2, status).bind(3, now_utc());
  s.step();
}

std::vector<StoredSearch> Store::searches() {
  std::vector<StoredSearch> out;
  Statement s(db_,
              "SELECT id, status, version, started_at, COALESCE(finished_at, ''), model, cluster, gpus, global_batch, "
              "top_k, candidates, dominated, pruned_memory, pruned_bound, evaluated, reused, fitting, seconds, inputs "
              "FROM searches ORDER BY id",
              path_);
  while (s.step()) {
    StoredSearch r;
    r.id = s.integer(0);
    r.status = s.text(1);
    r.version = s.text(2);
    r.started_at = s.text(3);
    r.finished_at = s.text(4);
    r.model = s.text(5);
    r.cluster = s.text(6);
    r.gpus = s.integer(7);
    r.global_batch = s.integer(8);
    r.top_k = s.integer(9);
    r.counts = counts_from(s, 10);
    r.seconds = s.real(17);
    r.inputs = nlohmann::json::parse(s.text(18), nullptr, false);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<StoredPlan> Store::plans(int64_t search_id, const std::string& where, int64_t limit) {
  std::string sql = "SELECT " + plan_columns() + " FROM plans WHERE search_id = ?1";
  if (!where.empty()) sql += " AND (" + where + ")";
  sql += " ORDER BY fits DESC, tokens_per_s DESC, key ASC";
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  std::vector<StoredPlan> out;
  Statement s(db_, sql, path_);
  s.bind(1, search_id);
  while (s.step()) {
    StoredPlan p;
    p.key = s.text(0);
    p.numbers = metrics_from_row(s);
    p.plan = parse_column(s.text(24), "plan");
    p.metrics = parse_column(s.text(25), "metrics");
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace stagecraft::planner
