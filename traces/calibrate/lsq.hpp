// Least-squares solvers for calibration (Eigen).
//
// Linear with non-negativity (link parameters):
//     minimize ‖A·x − b‖²   subject to x ≥ 0
// solved exactly for the few columns calibration has: the optimum is the unconstrained least-
// squares solution on its support, so every support S is tried (column-pivoting QR on A_S; rank-
// deficient supports are skipped) and the feasible one with the smallest residual wins.
//
// Nonlinear (efficiency curve and memory throughput), Levenberg–Marquardt:
//     minimize ‖r(φ)‖²,   step δ from (JᵀJ + λ·diag(JᵀJ))·δ = −Jᵀr,  J = ∂r/∂φ
// λ shrinks ×1/3 after a step that lowers the cost and grows ×4 after one that does not; stops
// when the step or the relative cost change falls below 1e-12, or after `max_iterations`.
// With a box lo ≤ φ ≤ hi (calibration's physical bounds), projected: a parameter at a bound whose
// gradient points out of the box is held for the step (the step is solved over the others), and
// the trial point is projected onto the box, so the cost still falls monotonically and no
// parameter ever leaves it; the fit reports which ended at a bound. (The projected step is that of
// Kanzow, Yamashita and Fukushima, J. Comput. Appl. Math. 172, 2004; holding the parameters that
// push outward is the active-set rule of bound-constrained Newton methods.)
//
// Both report the covariance of the estimate, s²·(JᵀJ)⁻¹ with s² = ‖r‖²/(N − p) (NaN when N ≤ p),
// for standard errors.
#pragma once

#include <functional>
#include <vector>

#include <Eigen/Dense>

namespace stagecraft::traces {

struct LinearFit {
  Eigen::VectorXd x;
  std::vector<bool> at_bound;      // x_j == 0 because the constraint is active
  double cost = 0;                 // ‖A·x − b‖²
  Eigen::MatrixXd covariance;      // over all columns; zero rows/columns for those at the bound
};

LinearFit nonnegative_least_squares(const Eigen::MatrixXd& A, const Eigen::VectorXd& b);

// Residuals r(φ) and, when J is not null, the Jacobian ∂r/∂φ (N × p).
using ResidualFunction = std::function<void(const Eigen::VectorXd& phi, Eigen::VectorXd& r, Eigen::MatrixXd* J)>;

struct NonlinearFit {
  Eigen::VectorXd phi;
  double cost = 0;                 // ‖r‖²
  int iterations = 0;
  bool converged = false;
  Eigen::MatrixXd covariance;
  Eigen::MatrixXd jacobian;        // at the solution
  std::vector<int> bound;          // per parameter: -1 at lo, +1 at hi, 0 inside (all 0 without a box)
};

// Box constraints on φ (each lo_j < hi_j; ±infinity for none).
struct Box {
  Eigen::VectorXd lo, hi;
};

// phi0 must lie in the box (it is projected onto it first).
NonlinearFit levenberg_marquardt(const ResidualFunction& f, Eigen::VectorXd phi0, int max_iterations = 200,
                                 const Box* box = nullptr);

// Rank of J with singular values below rcond·σ_max counted as zero.
int numerical_rank(const Eigen::MatrixXd& J, double rcond = 1e-9);

}  // namespace stagecraft::traces
