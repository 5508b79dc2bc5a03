#include "cli/checks.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include "cli/common.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/limits.hpp"
#include "sim/run_cost.hpp"

namespace stagecraft::cli {

namespace fs = std::filesystem;

namespace {

std::string in_quotes(const std::string& s) { return "\"" + (s.size() > 40 ? s.substr(0, 37) + "..." : s) + "\""; }

CLI::Validator integer_in(int64_t min, int64_t max, const std::string& what) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        int64_t v = 0;
        const char* end = s.data() + s.size();
        const auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && ptr == end && v >= min && v <= max) return {};
        return "expected " + what + " (at most " + std::to_string(max) + "), got " + in_quotes(s);
      },
      what);
}

CLI::Validator finite_above(bool allow_zero) {
  const std::string what = allow_zero ? "a finite number >= 0" : "a finite number > 0";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        const bool whole = end != nullptr && *end == '\0' && !s.empty();
        if (whole && errno == 0 && std::isfinite(v) && (v > 0 || (allow_zero && v == 0))) return {};
        return "expected " + what + ", got " + in_quotes(s);
      },
      what);
}

// Creates and removes a probe in `dir`; "" when that works, else why not.
std::string try_write_in(const fs::path& dir) {
  std::string probe = (dir / ".stagecraft-write-check-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

CLI::Validator positive_int(int64_t max) { return integer_in(1, max, "a positive integer"); }
CLI::Validator non_negative_int(int64_t max) { return integer_in(0, max, "a non-negative integer"); }
CLI::Validator positive_finite() { return finite_above(false); }
CLI::Validator non_negative_finite() { return finite_above(true); }

CLI::Validator writable_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "expected a file path, got an empty string";
        std::error_code ec;
        const fs::path p(s);
        const auto status = fs::status(p, ec);
        if (fs::is_directory(status)) return s + " is a directory; expected a file to write";
        if (fs::exists(status)) {
          if (::access(s.c_str(), W_OK) != 0) return "cannot write " + s + ": " + std::strerror(errno);
          return {};
        }
        const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
        if (!fs::is_directory(parent, ec)) return "cannot write " + s + ": the folder " + parent.string() + " does not exist";
        if (const std::string why = try_write_in(parent); !why.empty()) {
          return "cannot write " + s + ": cannot create files in " + parent.string() + " (" + why + ")";
        }
        return {};
      },
      "a writable file");
}

CLI::Validator writable_dir() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "expected a folder path, got an empty string";
        std::error_code ec;
        fs::path p = fs::absolute(fs::path(s), ec);
        if (ec) return "cannot use " + s + ": " + ec.message();
        if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return s + " exists and is not a folder";
        fs::path existing = p;
        while (!fs::exists(existing, ec) && existing.has_parent_path() && existing != existing.parent_path()) {
          existing = existing.parent_path();
        }
        if (!fs::is_directory(existing, ec)) return "cannot create " + s + ": " + existing.string() + " is not a folder";
        if (const std::string why = try_write_in(existing); !why.empty()) {
          return "cannot write in " + existing.string() + " (for " + s + "): " + why;
        }
        return {};
      },
      "a writable folder");
}

void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs, const std::string& option) {
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (fs::exists(output, ec) && fs::exists(in, ec) && fs::equivalent(output, in, ec)) {
      throw spec::SpecError(output, "", option + " is the input " + in + "; choose another file (an input is never overwritten)");
    }
  }
}

double host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return -1;
}

int64_t ranks_on_this_host(int64_t world) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      const long long n = std::atoll(v);
      if (n > 0) return n;
    }
  }
  return world;
}

namespace {
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

extern "C" void on_interrupt(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second signal ends the process
  std::signal(SIGTERM, SIG_DFL);
}
}  // namespace

void install_interrupt_handler() {
  g_interrupted.store(false);
  g_signal.store(0);
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

const std::atomic<bool>& interrupted() { return g_interrupted; }

int interrupted_exit_code() {
  const int sig = g_signal.load();
  return sig == 0 ? 0 : 128 + sig;
}

void rank_error(int64_t rank, const std::string& what) {
  const std::string line = "stagecraft: rank " + std::to_string(rank) + ": error: " + what + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

spec::Model load_model_arg(const std::string& arg) {
  spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, arg));
  for (const std::string& w : m.warnings) std::cerr << "stagecraft: warning: " << w << "\n";
  return m;
}

void warn_training_length(const spec::Model& m, const spec::Training* t) {
  if (m.length_note.empty() || (t != nullptr && t->seq_len)) return;
  std::cerr << "stagecraft: warning: " << m.length_note << "\n";
}

void add_set_option(CLI::App* app, std::vector<std::string>& sets) {
  app->add_option("--set", sets,
                  "what-if: override a cluster or training field, e.g. --set cluster.inter_node.nic_bandwidth_Bps=200Gbps "
                  "--set cluster.inter_node.nics_per_node=4 (repeatable; validated as if it were in the file)")
      ->take_all()
      ->expected(1, 1)
      ->allow_extra_args(false);
}

void add_training_options(CLI::App* app, TrainingArgs& a) {
  app->add_option("--seq-len", a.seq_len,
                  "tokens per sequence (default: the training file's seq_len, else the model's; a Hugging Face "
                  "config's max_position_embeddings is a limit, not the default)")
      ->check(positive_int(spec::limits::kSeqLen));
  a.global_batch_option = app->add_option("--global-batch", a.global_batch,
                                          "sequences per optimizer step over all replicas (default: the training file's)")
                              ->check(positive_int(spec::limits::kGlobalBatch));
  a.dtype_option = app->add_option("--dtype", a.dtype,
                                    "compute format: bf16, fp16, fp32, or fp8 (FP8 block GEMMs, bf16 elsewhere, as "
                                    "Transformer Engine runs it) (default: the training file's)")
                       ->check(CLI::IsMember({"bf16", "fp16", "fp32", "fp8"}));
}

spec::Training with_training_args(spec::Training t, const TrainingArgs& a) {
  spec::TrainingOverrides o;
  if (a.seq_len > 0) o.seq_len = a.seq_len;
  if (a.global_batch > 0) o.global_batch = a.global_batch;
  if (!a.dtype.empty()) o.dtype = spec::parse_dtype(a.dtype);
  return spec::with_overrides(std::move(t), o);
}

void add_cost_options(CLI::App* app, CostArgs& a) {
  app->add_option("--tokens", a.tokens,
                  "a token budget to time and price, e.g. 1T, 300B or 2e12 (decimal K, M, B/G, T)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (sim::parse_token_count(s)) return {};
            return "expected a token count from 1 to 1e18 such as 1T, 300B or 2e12, got " + in_quotes(s);
          },
          "TOKENS"));
  app->add_option("--gpu-hour-price", a.gpu_hour_price,
                  "price of one GPU-hour, in place of the cluster file's \"price\" (default: the file's, if any)")
      ->check(positive_finite());
  app->add_option("--currency", a.currency, "currency of --gpu-hour-price, a three-letter code (default USD)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return spec::valid_currency(s) ? std::string() : "expected a three-letter code such as USD or EUR, got " + in_quotes(s);
          },
          "CODE"));
}

std::optional<double> token_budget(const CostArgs& a) {
  if (a.tokens.empty()) return std::nullopt;
  return sim::parse_token_count(a.tokens);
}

void apply_price(spec::Cluster& c, const CostArgs& a) {
  if (a.gpu_hour_price > 0) {
    if (a.gpu_hour_price > spec::limits::kMaxGpuHourPrice) {
      throw spec::SpecError("--gpu-hour-price", "", "expected at most " + std::to_string(spec::limits::kMaxGpuHourPrice) +
                                                        " per GPU-hour");
    }
    c.price.per_gpu_hour = a.gpu_hour_price;
    c.price.currency = a.currency.empty() ? "USD" : a.currency;
    c.price.source = "--gpu-hour-price";
  } else if (!a.currency.empty()) {
    if (c.price.per_gpu_hour <= 0) throw spec::SpecError("--currency", "", "expected --gpu-hour-price with it (the cluster file gives no price)");
    if (a.currency != c.price.currency) {
      throw spec::SpecError("--currency", "", "the cluster file's price is in " + c.price.currency + "; give --gpu-hour-price in " +
                                                  a.currency + " to change it");
    }
  }
}

planner::HfTrainerArgs hf_args(const spec::Model& m) {
  planner::HfTrainerArgs hf;
  hf.hidden_size = m.hidden;
  return hf;
}

bool flush_stdout() {
  errno = 0;
  std::cout.flush();
  const bool stream_failed = std::cout.fail();
  int err = errno;
  const int rc = std::fflush(stdout);
  if (!stream_failed && rc == 0 && !std::ferror(stdout)) return true;
  if (err == 0) err = errno;
  std::cerr << "stagecraft: error: cannot write to standard output"
            << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
  return false;
}

}  // namespace stagecraft::cli
