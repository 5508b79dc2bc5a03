// The search off the GUI thread (docs/gui.md "Threading"): planner::search runs in a QThread of
// its own (the planner's pool does the parallel work; this thread only coordinates), its
// callbacks post copies to the GUI thread as queued signals, and Stop sets the search's cancel
// flag, so it ends after the batch in flight and keeps what it found (SearchResult::interrupted,
// counts.unexplored). One search at a time.
#pragma once

#include <QObject>
#include <QThread>

#include <atomic>
#include <memory>
#include <vector>

#include "gui/model/inputs.hpp"
#include "planner/search.hpp"

namespace stagecraft::gui {

using PlanBatch = std::shared_ptr<const std::vector<planner::Evaluated>>;
using SearchResultPtr = std::shared_ptr<const planner::SearchResult>;
using SpacePtr = std::shared_ptr<const planner::Space>;

class SearchWorker : public QObject {
  Q_OBJECT
 public:
  explicit SearchWorker(QObject* parent = nullptr);
  ~SearchWorker() override;   // stops a running search and waits for it

  bool running() const { return thread_ != nullptr; }
  // The thread the last search's callbacks ran on (tests: never the GUI thread).
  QThread* callback_thread() const { return callback_thread_.load(); }

 public slots:
  // Starts searching `space` (loaded by the caller, so that input errors show at once).
  // Ignored while a search runs.
  void start(SpacePtr space, const Inputs& inputs);
  void stop();

 signals:
  void started();
  void batch(PlanBatch rows, planner::Progress progress);
  void finished(SearchResultPtr result, SpacePtr space);
  void failed(QString message);

 private:
  QThread* thread_ = nullptr;
  std::atomic<bool> cancel_{false};
  std::atomic<QThread*> callback_thread_{nullptr};
};

}  // namespace stagecraft::gui

Q_DECLARE_METATYPE(stagecraft::gui::PlanBatch)
Q_DECLARE_METATYPE(stagecraft::gui::SearchResultPtr)
Q_DECLARE_METATYPE(stagecraft::gui::SpacePtr)
Q_DECLARE_METATYPE(stagecraft::planner::Progress)
