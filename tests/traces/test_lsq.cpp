// Least-squares solvers on problems solvable by hand.
#include "traces/calibrate/lsq.hpp"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace stagecraft::traces {
namespace {

TEST(Lsq, NonNegativeLeastSquaresExactAndAtTheBound) {
  // x = (1, 2) solves [1 0; 0 1; 1 1]·x = (1, 2, 3) exactly.
  Eigen::MatrixXd A(3, 2);
  A << 1, 0, 0, 1, 1, 1;
  const LinearFit exact = nonnegative_least_squares(A, Eigen::Vector3d(1, 2, 3));
  EXPECT_NEAR(exact.x(0), 1, 1e-12);
  EXPECT_NEAR(exact.x(1), 2, 1e-12);
  EXPECT_NEAR(exact.cost, 0, 1e-20);
  // I·x = (1, −1): unconstrained x = (1, −1); with x ≥ 0, x = (1, 0) and cost (−1)² = 1.
  const LinearFit bound = nonnegative_least_squares(Eigen::Matrix2d::Identity(), Eigen::Vector2d(1, -1));
  EXPECT_NEAR(bound.x(0), 1, 1e-12);
  EXPECT_EQ(bound.x(1), 0);
  EXPECT_NEAR(bound.cost, 1, 1e-12);
  EXPECT_FALSE(bound.at_bound[0]);
  EXPECT_TRUE(bound.at_bound[1]);
}

TEST(Lsq, LevenbergMarquardtFitsAnExponential) {
  // y = 2·exp(0.3·x) at x = 0..9, from the start (1, 0).
  const ResidualFunction f = [](const Eigen::VectorXd& p, Eigen::VectorXd& r, Eigen::MatrixXd* J) {
    r.resize(10);
    if (J) J->resize(10, 2);
    for (int i = 0; i < 10; ++i) {
      const double e = std::exp(p(1) * i);
      r(i) = p(0) * e - 2 * std::exp(0.3 * i);
      if (J) {
        (*J)(i, 0) = e;
        (*J)(i, 1) = p(0) * i * e;
      }
    }
  };
  const NonlinearFit fit = levenberg_marquardt(f, Eigen::Vector2d(1, 0));
  EXPECT_TRUE(fit.converged);
  EXPECT_NEAR(fit.phi(0), 2, 1e-8);
  EXPECT_NEAR(fit.phi(1), 0.3, 1e-9);
}

TEST(Lsq, LevenbergMarquardtStaysInItsBox) {
  // r(φ) = (φ0 − 3, φ1 − 1, φ0 + φ1 − 4): unconstrained optimum φ = (3, 1), cost 0. In the box
  // φ0 ≤ 2, φ1 ∈ [−5, 5], φ0 is held at 2 and φ1 minimises (φ1 − 1)² + (φ1 − 2)², so φ1 = 1.5 and
  // the cost is (2 − 3)² + 0.5² + 0.5² = 1.5.
  const ResidualFunction f = [](const Eigen::VectorXd& p, Eigen::VectorXd& r, Eigen::MatrixXd* J) {
    r = Eigen::Vector3d(p(0) - 3, p(1) - 1, p(0) + p(1) - 4);
    if (J) {
      J->resize(3, 2);
      *J << 1, 0, 0, 1, 1, 1;
    }
  };
  const Box box{Eigen::Vector2d(-5, -5), Eigen::Vector2d(2, 5)};
  const NonlinearFit fit = levenberg_marquardt(f, Eigen::Vector2d(0, 0), 200, &box);
  EXPECT_TRUE(fit.converged);
  EXPECT_EQ(fit.phi(0), 2);
  EXPECT_NEAR(fit.phi(1), 1.5, 1e-8);
  EXPECT_NEAR(fit.cost, 1.5, 1e-10);
  EXPECT_EQ(fit.bound, (std::vector<int>{1, 0}));
  // Without the box: the unconstrained optimum, nothing at a bound.
  const NonlinearFit free = levenberg_marquardt(f, Eigen::Vector2d(0, 0));
  EXPECT_NEAR(free.phi(0), 3, 1e-8);
  EXPECT_NEAR(free.phi(1), 1, 1e-8);
  EXPECT_EQ(free.bound, (std::vector<int>{0, 0}));
}

TEST(Lsq, RankOfDependentColumns) {
  Eigen::MatrixXd J(3, 2);
  J << 1, 2, 2, 4, 3, 6;
  EXPECT_EQ(numerical_rank(J), 1);
  J(2, 1) = 7;
  EXPECT_EQ(numerical_rank(J), 2);
}

}  // namespace
}  // namespace stagecraft::traces
