// stagecraft-gui: explore plans, their steps and memory (docs/gui.md).
//   stagecraft-gui [--model M --cluster C --training T --nodes N] [--search]
//   stagecraft-gui --demo                 the `stagecraft demo` case, searched at start
//   stagecraft-gui --demo --screenshots DIR [--quit-after MS]
//                                         saves a PNG of each view once the best plan's step is
//                                         shown (docs/ screenshots are made so), then quits
#include <QApplication>
#include <QCommandLineParser>
#include <QFontDatabase>
#include <QStyleFactory>
#include <QTimer>

#include <cstdio>
#include <memory>

#include "core/spec/bundled.hpp"
#include "gui/app/main_window.hpp"
#include "planner/space.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/views/inputs_panel.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("stagecraft-gui"));
  QApplication::setApplicationVersion(QStringLiteral(STAGECRAFT_VERSION));
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  // One fixed font where it is installed (fonts-dejavu-core), so that screenshots match.
  const int font = QFontDatabase::addApplicationFont(QStringLiteral("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"));
  if (font >= 0) QApplication::setFont(QFont(QStringLiteral("DejaVu Sans"), 9));

  QCommandLineParser p;
  p.setApplicationDescription(QStringLiteral("Stagecraft: explore training plans, their simulated steps and memory"));
  p.addHelpOption();
  p.addVersionOption();
  const QCommandLineOption model({QStringLiteral("model")}, QStringLiteral("model file or bundled name"), QStringLiteral("M"));
  const QCommandLineOption cluster({QStringLiteral("cluster")}, QStringLiteral("cluster file or bundled name"), QStringLiteral("C"));
  const QCommandLineOption training({QStringLiteral("training")}, QStringLiteral("training file or bundled name"), QStringLiteral("T"));
  const QCommandLineOption nodes({QStringLiteral("nodes")}, QStringLiteral("nodes in use"), QStringLiteral("N"));
  const QCommandLineOption demo({QStringLiteral("demo")}, QStringLiteral("the stagecraft demo case, searched at start"));
  const QCommandLineOption search({QStringLiteral("search")}, QStringLiteral("search at start"));
  const QCommandLineOption shots({QStringLiteral("screenshots")}, QStringLiteral("save PNGs of the views into DIR, then quit"),
                                 QStringLiteral("DIR"));
  const QCommandLineOption plan({QStringLiteral("plan")}, QStringLiteral("a plan to show (after the search, if one runs)"), QStringLiteral("P"));
  const QCommandLineOption measured({QStringLiteral("measured")},
                                    QStringLiteral("a measured trace of --plan to compare (repeat for one file per rank)"), QStringLiteral("FILE"));
  const QCommandLineOption quit_after({QStringLiteral("quit-after")}, QStringLiteral("quit after MS milliseconds whatever happened"),
                                      QStringLiteral("MS"));
  for (const auto& o : {model, cluster, training, nodes, demo, search, shots, plan, measured, quit_after}) p.addOption(o);
  p.process(app);

  stagecraft::gui::MainWindow w;
  stagecraft::gui::Inputs in = stagecraft::gui::demo_inputs();
  if (p.isSet(model)) in.model = p.value(model).toStdString();
  if (p.isSet(cluster)) in.cluster = p.value(cluster).toStdString();
  if (p.isSet(training)) in.training = p.value(training).toStdString();
  if (p.isSet(nodes)) in.nodes = p.value(nodes).toLongLong();
  w.inputs()->set_inputs(in);
  w.show();
  const bool searching = p.isSet(demo) || p.isSet(search) || (p.isSet(shots) && !p.isSet(plan));
  if (p.isSet(measured)) {
    std::vector<std::string> files;
    for (const QString& f : p.values(measured)) files.push_back(f.toStdString());
    // once the plan's step is simulated: load the measured trace against it (once)
    auto loaded = std::make_shared<bool>(false);
    std::string key;   // the measured trace is of --plan: wait for its step
    if (p.isSet(plan)) {
      try {
        key = stagecraft::planner::plan_key(stagecraft::spec::load_plan(
            stagecraft::spec::resolve_config(stagecraft::spec::ConfigKind::kPlan, p.value(plan).toStdString())));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "stagecraft-gui: %s\n", e.what());
        return 2;
      }
    }
    QObject::connect(&w, &stagecraft::gui::MainWindow::step_ready, &w, [&w, files, loaded, key] {
      if (*loaded || (!key.empty() && w.selected_key() != key)) return;
      *loaded = true;
      if (!w.compare()->load_measured(files)) {
        std::fprintf(stderr, "stagecraft-gui: %s\n", w.compare()->error().toLocal8Bit().constData());
      }
    }, Qt::DirectConnection);
  }
  if (p.isSet(plan)) {
    const std::string name = p.value(plan).toStdString();
    if (searching) {
      QObject::connect(&w, &stagecraft::gui::MainWindow::search_done, &w, [&w, name] { w.open_plan(name); });
    } else {
      QTimer::singleShot(0, &w, [&w, name] {
        if (!w.open_plan(name)) QApplication::exit(2);
      });
    }
  }
  if (p.isSet(shots)) {
    const QString dir = p.value(shots);
    QObject::connect(&w, &stagecraft::gui::MainWindow::step_ready, &w, [&w, dir] {
      QTimer::singleShot(300, &w, [&w, dir] {
        w.save_screenshots(dir);
        std::printf("stagecraft-gui: screenshots in %s\n", dir.toLocal8Bit().constData());
        QApplication::quit();
      });
    });
    QObject::connect(&w, &stagecraft::gui::MainWindow::search_done, &w, [&w] {
      if (w.result() && w.result()->top.empty()) {
        std::fprintf(stderr, "stagecraft-gui: the search found no plan; no screenshots\n");
        QApplication::exit(1);
      }
    });
  }
  if (p.isSet(quit_after)) QTimer::singleShot(p.value(quit_after).toInt(), &app, [] { QApplication::exit(3); });
  if (searching) QTimer::singleShot(0, &w, &stagecraft::gui::MainWindow::start_search);
  return QApplication::exec();
}
