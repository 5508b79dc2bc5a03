// The search against exhaustive simulation, its determinism over thread counts, Ctrl-C, the
// results store with --resume, a real SIGKILL mid-search, and the answer when nothing fits.
#include "planner/search.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "fixtures.hpp"
#include "support.hpp"
#include "planner/store.hpp"

namespace stagecraft::planner {
namespace {

using test::temp_path;

// A space small enough to simulate exhaustively (a few hundred plans), large enough that every
// pruning rule fires.
SpaceLimits exhaustive_limits() {
  SpaceLimits l;
  l.zero = {1, 3};
  l.recompute = {spec::Recompute::kNone, spec::Recompute::kSelective};
  l.reduce_bucket = {10'000'000, 1'000'000'000};
  l.prefetch_bucket = {10'000'000};
  l.max_live_parameters = {1'000'000'000};
  l.max_micro_batch = 8;
  return l;
}

void remove_db(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

void expect_same(const SearchResult& a, const SearchResult& b) {
  ASSERT_EQ(test::keys(a.top), test::keys(b.top));
  for (std::size_t i = 0; i < a.top.size(); ++i) EXPECT_EQ(a.top[i].metrics.step_time_s, b.top[i].metrics.step_time_s);
  EXPECT_EQ(test::keys(a.pareto), test::keys(b.pareto));
  EXPECT_EQ(a.counts.candidates, b.counts.candidates);
  EXPECT_EQ(a.counts.dominated, b.counts.dominated);
  EXPECT_EQ(a.counts.pruned_memory, b.counts.pruned_memory);
  EXPECT_EQ(a.counts.pruned_bound, b.counts.pruned_bound);
  EXPECT_EQ(a.counts.evaluated, b.counts.evaluated);
}

TEST(Search, FindsTheSameTopPlansAsSimulatingEverything) {
  const Space space = test::medium_space(exhaustive_limits());
  std::vector<Evaluated> everything;
  for (const auto& s : test::enumerate(space)) {
    if (s.verdict == Verdict::kDominated) continue;   // identical to a candidate simulated here
    Evaluated e;
    e.candidate = s.candidate;
    e.key = plan_key(space.plan(s.candidate));
    e.metrics = test::simulate(space, s.candidate).metrics;
    everything.push_back(e);
  }
  ASSERT_GT(everything.size(), 100u);
  std::vector<Evaluated> fitting;
  for (const Evaluated& e : everything) {
    if (e.metrics.fits) fitting.push_back(e);
  }
  std::sort(fitting.begin(), fitting.end(), better);
  fitting.resize(5);

  SearchOptions o;
  o.top_k = 5;
  o.threads = 2;
  const SearchResult r = search(space, o);
  EXPECT_EQ(test::keys(r.top), test::keys(fitting));
  for (std::size_t i = 0; i < r.top.size(); ++i) EXPECT_EQ(r.top[i].metrics.step_time_s, fitting[i].metrics.step_time_s);
  EXPECT_EQ(r.counts.evaluated + r.counts.pruned(), r.counts.candidates);
  EXPECT_LT(r.counts.evaluated, static_cast<int64_t>(everything.size()) / 4) << "the bounds should prune most plans";

  // The Pareto front is exact up to (1 + w) × the best step time.
  const double window = r.top.front().metrics.step_time_s * (1 + o.pareto_window);
  for (const Evaluated& f : r.pareto) {
    for (const Evaluated& e : everything) {
      if (!e.metrics.fits) continue;
      const bool dominates = e.metrics.step_time_s <= f.metrics.step_time_s &&
                             e.metrics.peak_memory_bytes <= f.metrics.peak_memory_bytes &&
                             (e.metrics.step_time_s < f.metrics.step_time_s || e.metrics.peak_memory_bytes < f.metrics.peak_memory_bytes);
      EXPECT_FALSE(dominates) << e.key << " dominates front plan " << f.key;
    }
  }
  for (const Evaluated& e : everything) {
    if (!e.metrics.fits || e.metrics.step_time_s > window) continue;
    const bool covered = std::any_of(r.pareto.begin(), r.pareto.end(), [&](const Evaluated& f) {
      return f.metrics.step_time_s <= e.metrics.step_time_s && f.metrics.peak_memory_bytes <= e.metrics.peak_memory_bytes;
    });
    EXPECT_TRUE(covered) << e.key << " is missing from the Pareto front";
  }
}

TEST(Search, ResultsAndCountsDoNotDependOnTheThreadCount) {
  const Space space = test::medium_space(exhaustive_limits());
  SearchOptions o;
  o.top_k = 4;
  o.threads = 1;
  const SearchResult one = search(space, o);
  o.threads = 3;
  const SearchResult three = search(space, o);
  expect_same(one, three);
  ASSERT_FALSE(one.top.empty());
}

TEST(Search, CtrlCStopsCleanlyWithWhatWasFound) {
  const Space space = test::medium_space(exhaustive_limits());
  std::atomic<bool> cancel{false};
  SearchOptions o;
  o.threads = 2;
  o.batch = 4;
  o.cancel = &cancel;
  int batches = 0;
  o.on_progress = [&](const Progress&) {
    if (++batches == 2) cancel.store(true);   // as the SIGINT handler would
  };
  const SearchResult r = search(space, o);
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(batches, 2);
  EXPECT_GT(r.counts.evaluated, 0);
  EXPECT_FALSE(r.top.empty()) << "the plans found before Ctrl-C are kept";

  cancel.store(true);
  o.on_progress = nullptr;
  const SearchResult early = search(space, o);
  EXPECT_TRUE(early.top.empty());
  EXPECT_NE(early.reason.find("interrupted"), std::string::npos) << early.reason;
}

// on_batch hands over each batch's simulated plans as they come: concatenated in call order they
// are the result's `evaluated`, key by key, and each call comes with that batch's progress.
TEST(Search, BatchesStreamEveryEvaluatedPlanInOrder) {
  const Space space = test::medium_space(exhaustive_limits());
  SearchOptions o;
  o.threads = 2;
  o.batch = 4;
  std::vector<std::string> streamed;
  std::vector<int64_t> counts_seen, candidates_seen;
  o.on_batch = [&](std::span<const Evaluated> fresh, const Progress& p) {
    for (const Evaluated& e : fresh) streamed.push_back(e.key);
    counts_seen.push_back(p.evaluated);
    EXPECT_EQ(p.evaluated, static_cast<int64_t>(streamed.size())) << "progress counts what was streamed";
    EXPECT_EQ(p.counts.evaluated, p.evaluated);
    candidates_seen.push_back(p.counts.candidates);
  };
  const SearchResult r = search(space, o);
  for (int64_t c : candidates_seen) EXPECT_EQ(c, r.counts.candidates) << "enumeration is done before the first batch";
  ASSERT_EQ(streamed.size(), r.evaluated.size());
  for (std::size_t i = 0; i < streamed.size(); ++i) EXPECT_EQ(streamed[i], r.evaluated[i].key) << i;
  ASSERT_GT(counts_seen.size(), 1u) << "a batch of 4 over this space takes several batches";
  EXPECT_TRUE(std::is_sorted(counts_seen.begin(), counts_seen.end()));
}

TEST(Search, ResumeReusesEveryStoredPlan) {
  const std::string db = temp_path("resume.sqlite");
  remove_db(db);
  const Space space = test::medium_space(exhaustive_limits());
  SearchOptions o;
  o.threads = 2;
  o.db = db;
  const SearchResult first = search(space, o);
  EXPECT_FALSE(first.resumed);
  o.resume = true;
  const SearchResult again = search(space, o);
  EXPECT_TRUE(again.resumed);
  EXPECT_EQ(again.search_id, first.search_id);
  expect_same(first, again);
  EXPECT_EQ(again.counts.reused, again.counts.evaluated);
  Store store(db, true);
  EXPECT_EQ(static_cast<int64_t>(store.plans(first.search_id, "", 0).size()), first.counts.evaluated);
  EXPECT_EQ(store.searches().back().status, "complete");
  remove_db(db);
}

int64_t committed_plans(const std::string& db) {
  sqlite3* h = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 1000);
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM plans", -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
      n = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(h);
  return n;
}

// Forks a search into `db` and SIGKILLs it once `at_least` plans are committed, plus a random
// 0-5 ms (inside a transaction as often as between two). Returns the plans committed at the kill.
int64_t search_killed_after(const Space& space, const SearchOptions& o, int64_t at_least, std::mt19937& rng) {
  const pid_t child = fork();
  EXPECT_GE(child, 0);
  if (child == 0) {
    search(space, o);
    _exit(0);
  }
  int64_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
  while ((seen = committed_plans(o.db)) < at_least && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 5000)(rng)));
  seen = std::max(seen, committed_plans(o.db));
  EXPECT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the search finished before the kill at " << at_least << " plans";
  return seen;
}

// The medium space with one reduce and one prefetch bucket size (1e7 elements): about 200 plans
// to simulate, a second or so, enough commits (one per two plans) to kill a search between them.
Space store_space() {
  SpaceLimits limits;
  limits.reduce_bucket = {10'000'000};
  limits.prefetch_bucket = {10'000'000};
  return test::medium_space(limits);
}

// SIGKILL at three random points (each resumed search killed again), then a resume to the end:
// no committed plan is ever lost, and the result is the uninterrupted search's.
TEST(Search, SigkillAtRandomPointsThenResumeLosesNoPlan) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string db = temp_path("killed.sqlite");
  remove_db(db);
  const Space space = store_space();
  SearchOptions o;
  o.threads = 1;
  o.batch = 2;                 // a commit every two plans
  o.pareto_window = 10;        // a Pareto front up to 11x the best step time
  const SearchResult fresh = search(space, o);
  const int64_t total = fresh.counts.evaluated;
  ASSERT_GT(total, 30);
  // Three kill points spread over the run: one in each third of the plans.
  std::vector<int64_t> points;
  for (int third = 0; third < 3; ++third) {
    points.push_back(std::uniform_int_distribution<int64_t>(1 + third * total / 3, (third + 1) * total / 3 - 2)(rng));
  }
  o.db = db;
  int64_t committed = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    o.resume = i > 0;
    const int64_t seen = search_killed_after(space, o, std::max(points[i], committed + 1), rng);
    const int64_t after_kill = committed_plans(db);
    EXPECT_GE(after_kill, seen) << "committed plans were lost at kill " << i;
    EXPECT_GE(after_kill, committed) << "plans of an earlier run were lost at kill " << i;
    committed = after_kill;
    Store store(db, true);
    EXPECT_EQ(store.searches().back().status, "running") << "kill " << i;  // never finished
  }
  o.threads = 2;
  o.resume = true;
  const SearchResult resumed = search(space, o);
  EXPECT_TRUE(resumed.resumed);
  EXPECT_GE(resumed.counts.reused, committed);
  expect_same(resumed, fresh);
  EXPECT_EQ(committed_plans(db), total);
  remove_db(db);
}

// Two searches writing one store at once (two processes, WAL, BEGIN IMMEDIATE, a busy timeout):
// both finish, the file passes SQLite's integrity check, and each search holds all of its plans.
TEST(Search, TwoSearchesOnOneStoreAtOnceBothComplete) {
  const std::string db = temp_path("shared.sqlite");
  remove_db(db);
  const Space space = store_space();
  SearchOptions o;
  o.threads = 1;
  o.batch = 2;
  o.pareto_window = 10;
  const SearchResult fresh = search(space, o);
  o.db = db;
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        search(space, o);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "search %d: %s\n", c, e.what());
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a search failed (status " << status << ")";
  }
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
  sqlite3_close(h);
  Store store(db, true);
  const std::vector<StoredSearch> searches = store.searches();
  ASSERT_EQ(searches.size(), 2u);
  for (const StoredSearch& s : searches) {
    EXPECT_EQ(s.status, "complete");
    EXPECT_EQ(s.counts.evaluated, fresh.counts.evaluated);
    const std::vector<StoredPlan> best = store.plans(s.id, "", static_cast<int64_t>(fresh.top.size()));
    ASSERT_EQ(best.size(), fresh.top.size());
    for (std::size_t i = 0; i < best.size(); ++i) EXPECT_EQ(best[i].key, fresh.top[i].key) << "search " << s.id;
  }
  EXPECT_EQ(committed_plans(db), 2 * fresh.counts.evaluated);
  remove_db(db);
}

TEST(Search, AModelThatFitsNowhereSaysSo) {
  // 175 B parameters on 8 GPUs: even ZeRO-3 with offload keeps 2 × 175e9 / 8 bytes of fp16
  // parameters and as much of gradients per GPU, 87.5 GB, above an H100's 80 GiB.
  const Space space(test::bundled_model("gpt3-175b"), test::bundled_cluster("dgx-h100-ndr", 1), test::training(8), 8, {});
  SearchOptions o;
  o.threads = 2;
  const SearchResult r = search(space, o);
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.counts.evaluated, 0);
  EXPECT_EQ(r.counts.pruned_memory + r.counts.dominated, r.counts.candidates);
  EXPECT_NE(r.reason.find("no plan fits in memory"), std::string::npos) << r.reason;
}

// The model-error lines group the first five rows by ZeRO class, in the order the classes first
// appear, and quote the record's runs of the framework for each.
TEST(ModelErrorLines, GroupTheTopRowsByZeroClass) {
  sim::ValidationRecord record;
  record.file = "record.json";
  // fsdp ZeRO-3: r 1.2 and 1.4 (median 1.3); fsdp ZeRO 0-2: none.
  record.runs = {{"s", "1", "", spec::Framework::kFsdp, "A100", 8, 3, 1.2, ""}, {"s", "2", "", spec::Framework::kFsdp, "A100", 64, 3, 1.4, ""}};
  std::vector<Evaluated> top(7);
  const int stages[] = {1, 3, 1, 3, 0, 3, 3};  // rows 1, 3, 5 are ZeRO 0-2, rows 2, 4 ZeRO-3; rows 6-7 beyond the fifth
  for (std::size_t i = 0; i < top.size(); ++i) top[i].plan.zero.stage = stages[i];
  const std::vector<std::string> lines = model_error_lines(top, spec::Model{}, spec::Framework::kFsdp, record);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[1].find("rows 1, 3, 5: no published fsdp ZeRO 0-2 run"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("rows 2, 4: 2 published fsdp ZeRO-3 runs (A100; 8-64 GPUs) took 1.20-1.40x (median 1.30x)"),
            std::string::npos)
      << lines[2];
  EXPECT_TRUE(model_error_lines({}, spec::Model{}, spec::Framework::kFsdp, record).empty());
  // the search's GPU: both runs are on A100, one range as above; on an H100 none is, and it says so
  EXPECT_EQ(model_error_lines(top, spec::Model{}, spec::Framework::kFsdp, record, "A100-SXM4-80GB")[2], lines[2]);
  const std::vector<std::string> h100 = model_error_lines(top, spec::Model{}, spec::Framework::kFsdp, record, "H100-SXM5-80GB");
  EXPECT_NE(h100[2].find("rows 2, 4: no checked run on H100; 2 published fsdp ZeRO-3 runs (A100; 8-64 GPUs)"), std::string::npos)
      << h100[2];
}

}  // namespace
}  // namespace stagecraft::planner
