#include "gui/jobs/search_worker.hpp"

#include <QMetaObject>

namespace stagecraft::gui {

namespace {
const int kRegistered = [] {
  qRegisterMetaType<PlanBatch>();
  qRegisterMetaType<SearchResultPtr>();
  qRegisterMetaType<SpacePtr>();
  qRegisterMetaType<planner::Progress>();
  return 0;
}();
}  // namespace

SearchWorker::SearchWorker(QObject* parent) : QObject(parent) { (void)kRegistered; }

SearchWorker::~SearchWorker() {
  if (thread_) {
    cancel_.store(true);
    thread_->wait();
    delete thread_;
  }
}

void SearchWorker::start(SpacePtr space, const Inputs& inputs) {
  if (thread_ || !space) return;
  cancel_.store(false);
  planner::SearchOptions o;
  o.top_k = inputs.top_k;
  o.threads = inputs.threads > 0 ? inputs.threads : std::max(1, QThread::idealThreadCount() - 1);
  o.pareto_window = inputs.pareto_window;
  o.db = inputs.db;
  o.resume = inputs.resume;
  o.cancel = &cancel_;
  o.on_batch = [this](std::span<const planner::Evaluated> fresh, const planner::Progress& p) {
    callback_thread_.store(QThread::currentThread());
    auto rows = std::make_shared<const std::vector<planner::Evaluated>>(fresh.begin(), fresh.end());
    QMetaObject::invokeMethod(this, [this, rows, p] { emit batch(rows, p); }, Qt::QueuedConnection);
  };
  thread_ = QThread::create([this, space, o] {
    try {
      auto result = std::make_shared<const planner::SearchResult>(planner::search(*space, o));
      QMetaObject::invokeMethod(this, [this, result, space] {
        thread_->wait();
        delete thread_;
        thread_ = nullptr;
        emit finished(result, space);
      }, Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString what = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(this, [this, what] {
        thread_->wait();
        delete thread_;
        thread_ = nullptr;
        emit failed(what);
      }, Qt::QueuedConnection);
    }
  });
  thread_->start();
  emit started();
}

void SearchWorker::stop() { cancel_.store(true); }

}  // namespace stagecraft::gui
