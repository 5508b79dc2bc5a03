// The results store: schema, one transaction per batch, filters, and clear errors.
#include "planner/store.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <sqlite3.h>

#include "fixtures.hpp"
#include "support.hpp"

namespace stagecraft::planner {
namespace {

using test::temp_path;

Evaluated row(const Space& space, const std::string& pinned, int tp, int pp) {
  Candidate c;
  c.tp = tp;
  c.pp = pp;
  c.dp = static_cast<int32_t>(space.gpus() / (tp * pp));
  c.micro_batch = 1;
  c.micro_batches = static_cast<int32_t>(space.training().global_batch / c.dp);
  Evaluated e;
  e.candidate = c;
  e.plan = space.plan(c);
  e.key = plan_key(e.plan) + pinned;
  e.metrics.step_time_s = 1.0 + tp;
  e.metrics.tokens_per_s = 1000.0 / (1.0 + tp);
  e.metrics.fits = 1;
  e.metrics.peak_memory_bytes = int64_t{1} << 30;
  e.metrics.capacity_bytes = space.cluster().gpu.memory_bytes;
  return e;
}

TEST(Store, RecordsASearchAndItsPlansAndReadsThemBack) {
  const std::string path = temp_path("a.sqlite");
  std::filesystem::remove(path);
  const Space space = test::medium_space();
  int64_t id = 0;
  {
    Store store(path, false);
    bool resumed = true;
    id = store.start_search(space.to_json(), "test", 3, false, &resumed);
    EXPECT_FALSE(resumed);
    const Evaluated a = row(space, "", 1, 1), b = row(space, "", 2, 1), c = row(space, "", 2, 2);
    Counts counts;
    counts.candidates = 10;
    counts.evaluated = 3;
    store.record(id, {&a, &b}, counts, 1.5);
    store.record(id, {&c, &a}, counts, 2.5);   // a again: ignored
    store.finish(id, "complete", counts, 3.0);
    // same inputs and version: --resume finds it
    const int64_t again = store.start_search(space.to_json(), "test", 3, true, &resumed);
    EXPECT_TRUE(resumed);
    EXPECT_EQ(again, id);
  }
  Store store(path, true);
  const auto searches = store.searches();
  ASSERT_EQ(searches.size(), 1u);
  EXPECT_EQ(searches[0].model, "gpt3-1.3b");
  EXPECT_EQ(searches[0].gpus, 8);
  EXPECT_EQ(searches[0].counts.candidates, 10);
  const auto plans = store.plans(id, "", 0);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].numbers.step_time_s, 2.0);   // tp 1 first: the most tokens/s
  EXPECT_EQ(plans[0].plan.at("tp"), 1);
  EXPECT_EQ(plans[0].metrics.at("step_time_s"), 2.0);
  EXPECT_EQ(store.plans(id, "tp = 2 AND pp = 2", 0).size(), 1u);
  EXPECT_EQ(store.plans(id, "", 2).size(), 2u);
  EXPECT_EQ(store.load_metrics(id).size(), 3u);
  EXPECT_THROW(store.plans(id, "no_such_column > 1", 0), StoreError);
  EXPECT_THROW(store.plans(id, "1); DROP TABLE plans; --", 0), StoreError);
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
}

TEST(Store, AFileThatIsNotAStoreIsABadInput) {
  const std::string path = temp_path("not-a-db.sqlite");
  std::ofstream(path) << "hello";
  try {
    Store store(path, true);
    ADD_FAILURE() << "opened a text file as a results store";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.file(), path);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(Store("/nonexistent-dir/x.sqlite", false), StoreError);
}

void run_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
}

std::string store_error(const std::string& path, bool read_only) {
  try {
    Store store(path, read_only);
  } catch (const StoreError& e) {
    return e.what();
  }
  return "";
}

// Another program's database is never written into; a newer schema is never misread.
TEST(Store, ForeignAndNewerDatabasesAreRefused) {
  const std::string foreign = temp_path("foreign.sqlite");
  std::filesystem::remove(foreign);
  run_sql(foreign, "CREATE TABLE foo (a INTEGER)");
  EXPECT_NE(store_error(foreign, false).find("not a Stagecraft results database (it holds 1 table(s)"), std::string::npos);
  EXPECT_NE(store_error(foreign, true).find("not a Stagecraft results database"), std::string::npos);
  {
    sqlite3* db = nullptr;
    sqlite3_open(foreign.c_str(), &db);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", -1, &st, nullptr);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 1);  // nothing was added next to foo
    sqlite3_finalize(st);
    sqlite3_close(db);
  }

  const std::string newer = temp_path("newer.sqlite");
  std::filesystem::remove(newer);
  { Store created(newer, false); }
  run_sql(newer, "UPDATE meta SET value = '999' WHERE key = 'schema_version'");
  EXPECT_NE(store_error(newer, false).find("newer Stagecraft (schema version 999"), std::string::npos);
  EXPECT_NE(store_error(newer, true).find("newer Stagecraft"), std::string::npos);

  const std::string empty = temp_path("empty.sqlite");
  std::ofstream(empty).close();
  EXPECT_NE(store_error(empty, true).find("it is empty"), std::string::npos);
  EXPECT_EQ(store_error(empty, false), "");  // an empty file named by --db becomes a store
  for (const std::string& p : {foreign, newer, empty}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace stagecraft::planner

namespace stagecraft::planner {
namespace {

// Context parallelism's columns (schema 2) and expert parallelism's (3): a plan's sizes, cp comm type
// and lane times are kept and filtered on; a version-1 store reads with those times 0 and is
// migrated when opened for writing, its plans at cp 1 and ep 1.
TEST(Store, ContextParallelColumnsAndTheVersionOneMigration) {
  const std::string path = temp_path("cp.sqlite");
  std::filesystem::remove(path);
  const Space space = test::medium_space();
  Evaluated a = row(space, "", 1, 1), b = row(space, "", 2, 1);
  b.candidate.cp = 2;
  b.candidate.dp /= 2;
  b.candidate.cp_comm = spec::CpComm::kAllGather;
  b.plan = space.plan(b.candidate);
  b.key = plan_key(b.plan);
  b.metrics.time.cp_s = 0.25;
  // expert parallelism's columns (schema 3): kept as the plan says (the store checks no plan)
  a.plan.ep = 4;
  a.metrics.time.ep_s = 0.5;
  int64_t id = 0;
  {
    Store store(path, false);
    bool resumed = false;
    id = store.start_search(space.to_json(), "test", 3, false, &resumed);
    Counts counts;
    store.record(id, {&a, &b}, counts, 1.0);
  }
  {
    Store store(path, true);
    const auto cp = store.plans(id, "cp = 2 AND cp_comm_type = 'all_gather'", 0);
    ASSERT_EQ(cp.size(), 1u);
    EXPECT_EQ(cp[0].numbers.time.cp_s, 0.25);
    EXPECT_EQ(cp[0].plan.at("cp"), 2);
    EXPECT_EQ(store.plans(id, "cp = 1", 0).size(), 1u);
    const auto ep = store.plans(id, "ep = 4 AND ep_comm_s = 0.5", 0);
    ASSERT_EQ(ep.size(), 1u);
    EXPECT_EQ(ep[0].numbers.time.ep_s, 0.5);
  }
  // back to version 1: the columns dropped, the version said
  run_sql(path, "ALTER TABLE plans DROP COLUMN ep_comm_s; ALTER TABLE plans DROP COLUMN ep; "
                "ALTER TABLE plans DROP COLUMN cp_comm_s; ALTER TABLE plans DROP COLUMN cp_comm_type; "
                "ALTER TABLE plans DROP COLUMN cp; UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  {
    Store store(path, true);   // read-only: nothing changes, the cp time reads 0
    const auto all = store.plans(id, "", 0);
    ASSERT_EQ(all.size(), 2u);
    for (const StoredPlan& p : all) EXPECT_EQ(p.numbers.time.cp_s, 0.0);
    for (const StoredPlan& p : all) EXPECT_EQ(p.numbers.time.ep_s, 0.0);
  }
  {
    Store store(path, false);   // for writing: migrated through version 2 to 3, every plan at cp 1 and ep 1
    EXPECT_EQ(store.plans(id, "cp = 1 AND cp_comm_type = 'p2p' AND cp_comm_s = 0 AND ep = 1 AND ep_comm_s = 0", 0).size(), 2u);
  }
  run_sql(path, "SELECT 1");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, nullptr);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "3");
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
}

}  // namespace
}  // namespace stagecraft::planner
