// stagecraft-gui: explore plans, their steps and memory (docs/gui.md).
//   stagecraft-gui [--model M --cluster C --training T --nodes N] [--search]
//   stagecraft-gui --demo                 the `stagecraft demo` case, searched at start
//   stagecraft-gui --demo --screenshots DIR [--quit-after MS]
//                                         saves a PNG of each view once the best plan's step is
//                                         shown (docs/ screenshots are made so), then quits
// The command line follows the CLI's rules (docs/reliability.md, "The GUI's command line"): an
// option or a file that is wrong ends it with exit 2 and a message naming it, before a window
// opens; a headless task (--screenshots) that cannot finish exits 1 saying why; never a silent
// wait.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFontDatabase>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTimer>

#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/plan.hpp"
#include "core/thread/allocator.hpp"
#include "gui/app/main_window.hpp"
#include "planner/space.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/views/inputs_panel.hpp"

namespace {

// The message, on stderr as the CLI prints its errors; returns `code` for main to return.
int fail(int code, const std::string& what) {
  std::fprintf(stderr, "stagecraft-gui: %s\n", what.c_str());
  if (code == 2) std::fprintf(stderr, "Run 'stagecraft-gui --help' for the options.\n");
  return code;
}

// A whole number in [lo, hi], or nothing.
std::optional<long long> whole(const QString& text, long long lo, long long hi) {
  bool ok = false;
  const long long v = text.trimmed().toLongLong(&ok);
  if (!ok || v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  stagecraft::thread::keep_freed_memory();
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("stagecraft-gui"));
  QApplication::setApplicationVersion(QStringLiteral(STAGECRAFT_VERSION));
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  // One fixed font where it is installed (fonts-dejavu-core), so that screenshots match.
  const int font = QFontDatabase::addApplicationFont(QStringLiteral("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"));
  if (font >= 0) QApplication::setFont(QFont(QStringLiteral("DejaVu Sans"), 9));

  QCommandLineParser p;
  p.setApplicationDescription(QStringLiteral("Stagecraft: explore training plans, their simulated steps and memory"));
  const QCommandLineOption help = p.addHelpOption();
  const QCommandLineOption version = p.addVersionOption();
  const QCommandLineOption model({QStringLiteral("model")}, QStringLiteral("model file or bundled name"), QStringLiteral("M"));
  const QCommandLineOption cluster({QStringLiteral("cluster")}, QStringLiteral("cluster file or bundled name"), QStringLiteral("C"));
  const QCommandLineOption training({QStringLiteral("training")}, QStringLiteral("training file or bundled name"), QStringLiteral("T"));
  const QCommandLineOption nodes({QStringLiteral("nodes")},
                                 QStringLiteral("nodes in use (default: the demo's, or the --cluster file's)"), QStringLiteral("N"));
  const QCommandLineOption demo({QStringLiteral("demo")}, QStringLiteral("the stagecraft demo case, searched at start"));
  const QCommandLineOption search({QStringLiteral("search")}, QStringLiteral("search at start"));
  const QCommandLineOption shots({QStringLiteral("screenshots")}, QStringLiteral("save PNGs of the views into DIR, then quit"),
                                 QStringLiteral("DIR"));
  const QCommandLineOption plan({QStringLiteral("plan")}, QStringLiteral("a plan to show (after the search, if one runs)"), QStringLiteral("P"));
  const QCommandLineOption measured({QStringLiteral("measured")},
                                    QStringLiteral("a measured trace of --plan to compare (repeat for one file per rank)"), QStringLiteral("FILE"));
  const QCommandLineOption quit_after({QStringLiteral("quit-after")},
                                      QStringLiteral("quit after MS milliseconds (exit 1 if --screenshots were not saved by then)"),
                                      QStringLiteral("MS"));
  for (const auto& o : {model, cluster, training, nodes, demo, search, shots, plan, measured, quit_after}) p.addOption(o);
  if (!p.parse(QCoreApplication::arguments())) return fail(2, p.errorText().toStdString());
  if (p.isSet(help)) p.showHelp(0);
  if (p.isSet(version)) p.showVersion();
  if (!p.positionalArguments().isEmpty()) {
    return fail(2, "unexpected argument '" + p.positionalArguments().front().toStdString() + "' (files are given with --model, --cluster, --training, --plan)");
  }
  const auto single = [&](const QCommandLineOption& o) {   // an option given twice is ambiguous, as in the CLI
    return p.values(o).size() <= 1;
  };
  for (const auto& o : {model, cluster, training, nodes, shots, plan, quit_after}) {
    if (!single(o)) return fail(2, "--" + o.names().front().toStdString() + " given more than once");
  }

  // The inputs, checked before a window opens: every value of the command line, and the files it names.
  stagecraft::gui::Inputs in = stagecraft::gui::demo_inputs();
  if (p.isSet(model)) in.model = p.value(model).toStdString();
  if (p.isSet(cluster)) in.cluster = p.value(cluster).toStdString();
  if (p.isSet(training)) in.training = p.value(training).toStdString();
  constexpr long long kMaxNodes = stagecraft::gui::InputsPanel::kMaxNodes;
  if (p.isSet(nodes)) {
    const auto n = whole(p.value(nodes), 1, kMaxNodes);
    if (!n) {
      return fail(2, "--nodes: expected a whole number of nodes from 1 to " + std::to_string(kMaxNodes) + ", got '" +
                         p.value(nodes).toStdString() + "'");
    }
    in.nodes = *n;
  } else if (p.isSet(cluster)) {
    in.nodes = 0;   // the cluster file's, read below
  }
  std::optional<long long> quit_ms;
  if (p.isSet(quit_after)) {
    quit_ms = whole(p.value(quit_after), 0, std::numeric_limits<int>::max());
    if (!quit_ms) {
      return fail(2, "--quit-after: expected a whole number of milliseconds from 0 to " + std::to_string(std::numeric_limits<int>::max()) +
                         ", got '" + p.value(quit_after).toStdString() + "'");
    }
  }
  if (p.isSet(measured) && !p.isSet(plan)) return fail(2, "--measured: needs --plan, the plan the trace measured");
  QString shots_dir;
  if (p.isSet(shots)) {
    shots_dir = p.value(shots);
    if (shots_dir.isEmpty() || !QDir().mkpath(shots_dir)) {
      return fail(2, "--screenshots: cannot create the folder '" + shots_dir.toStdString() + "'");
    }
  }
  std::string plan_key;   // the measured trace is of --plan: its step is the one to wait for
  const bool named = p.isSet(model) || p.isSet(cluster) || p.isSet(training) || p.isSet(nodes) || p.isSet(plan);
  const bool searching = p.isSet(demo) || p.isSet(search) || (p.isSet(shots) && !p.isSet(plan));
  if (named || searching || p.isSet(shots)) {
    try {
      const stagecraft::gui::Loaded l = stagecraft::gui::load(in);
      if (in.nodes == 0) {
        if (l.cluster.nodes > kMaxNodes) {
          return fail(2, in.cluster + ": " + std::to_string(l.cluster.nodes) + " nodes; the GUI takes at most " + std::to_string(kMaxNodes) +
                             " (--nodes)");
        }
        in.nodes = l.cluster.nodes;
      }
      if (p.isSet(plan)) {
        const stagecraft::spec::Plan pl = stagecraft::spec::load_plan(
            stagecraft::spec::resolve_config(stagecraft::spec::ConfigKind::kPlan, p.value(plan).toStdString()));
        stagecraft::spec::validate_plan(pl, l.space->model(), l.space->training(), l.space->gpus());
        plan_key = stagecraft::planner::plan_key(pl);
      }
    } catch (const stagecraft::spec::SpecError& e) {
      return fail(2, e.what());
    } catch (const std::bad_alloc&) {
      return fail(1, "out of memory while reading the inputs");
    } catch (const std::exception& e) {
      return fail(1, e.what());
    }
  }

  stagecraft::gui::MainWindow w;
  w.inputs()->set_inputs(in);
  w.show();
  const bool headless = p.isSet(shots);   // a task that ends the program: its failures end it too
  int task_failed = 0;                    // the exit status of a failed headless task
  const auto end_task = [&task_failed](int code, const std::string& why) {
    if (task_failed) return;
    task_failed = code;
    std::fprintf(stderr, "stagecraft-gui: %s\n", why.c_str());
    QApplication::exit(code);
  };
  if (p.isSet(measured)) {
    std::vector<std::string> files;
    for (const QString& f : p.values(measured)) files.push_back(f.toStdString());
    // once the plan's step is simulated: load the measured trace against it (once)
    auto loaded = std::make_shared<bool>(false);
    QObject::connect(&w, &stagecraft::gui::MainWindow::step_ready, &w, [&w, files, loaded, plan_key, headless, &end_task] {
      if (*loaded || w.selected_key() != plan_key) return;
      *loaded = true;
      if (!w.compare()->load_measured(files)) {
        const std::string why = "--measured: " + w.compare()->error().toStdString();
        if (headless) {
          end_task(2, why);
        } else {
          std::fprintf(stderr, "stagecraft-gui: %s\n", why.c_str());
        }
      }
    }, Qt::DirectConnection);
  }
  if (p.isSet(plan)) {
    const std::string name = p.value(plan).toStdString();
    const auto open = [&w, name, &end_task] {
      if (!w.open_plan(name)) end_task(2, "--plan " + name + ": " + w.statusBar()->currentMessage().toStdString());
    };
    if (searching) {
      QObject::connect(&w, &stagecraft::gui::MainWindow::search_done, &w, [&w, open] {
        if (w.result()) open();
      });
    } else {
      QTimer::singleShot(0, &w, open);
    }
  }
  bool shots_saved = false;
  bool shooting = false;   // once: save_screenshots selects other plans, whose steps are ready too
  if (headless) {
    QObject::connect(&w, &stagecraft::gui::MainWindow::step_ready, &w, [&w, shots_dir, &shots_saved, &shooting, &end_task] {
      if (shooting) return;
      shooting = true;
      QTimer::singleShot(300, &w, [&w, shots_dir, &shots_saved, &end_task] {
        try {
          w.save_screenshots(shots_dir);
        } catch (const stagecraft::spec::SpecError& e) {
          end_task(2, std::string("--screenshots: ") + e.what());
          return;
        } catch (const std::exception& e) {
          end_task(1, std::string("--screenshots: ") + e.what());
          return;
        }
        shots_saved = true;
        std::printf("stagecraft-gui: screenshots in %s\n", shots_dir.toLocal8Bit().constData());
        QApplication::quit();
      });
    });
    QObject::connect(&w, &stagecraft::gui::MainWindow::search_done, &w, [&w, &end_task] {
      if (!w.result()) {
        end_task(1, "the search failed: " + w.search_error().toStdString() + "; no screenshots");
      } else if (w.result()->top.empty()) {
        end_task(1, "the search found no plan; no screenshots");
      }
    });
    QObject::connect(&w, &stagecraft::gui::MainWindow::step_failed, &w, [&end_task](const QString& key, const QString& why) {
      end_task(1, "could not simulate " + key.toStdString() + ": " + why.toStdString() + "; no screenshots");
    });
  }
  if (quit_ms) {
    QTimer::singleShot(static_cast<int>(*quit_ms), &app, [headless, &shots_saved, &end_task, ms = *quit_ms] {
      if (headless && !shots_saved) {
        end_task(1, "--quit-after " + std::to_string(ms) + ": the time ran out before the screenshots were saved");
      } else {
        QApplication::exit(0);
      }
    });
  }
  if (searching) QTimer::singleShot(0, &w, &stagecraft::gui::MainWindow::start_search);
  const int status = QApplication::exec();
  return task_failed ? task_failed : status;
}
