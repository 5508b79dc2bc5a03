// One QApplication for every GUI test, headless and deterministic: the offscreen platform unless
// the caller chose one, no high-DPI scaling, DejaVu Sans as the application font, Fusion style.
#include <QApplication>
#include <QFontDatabase>
#include <QStyleFactory>

#include <cstdlib>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  setenv("QT_QPA_PLATFORM", "offscreen", 0);
  setenv("QT_SCALE_FACTOR", "1", 1);
  setenv("QT_ENABLE_HIGHDPI_SCALING", "0", 1);
  ::testing::InitGoogleTest(&argc, argv);
  QApplication app(argc, argv);
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  if (QFontDatabase::addApplicationFont(QStringLiteral("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")) >= 0) {
    QApplication::setFont(QFont(QStringLiteral("DejaVu Sans"), 9));
  }
  return RUN_ALL_TESTS();
}
