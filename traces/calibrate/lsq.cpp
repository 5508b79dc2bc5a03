#include "traces/calibrate/lsq.hpp"

#include <cmath>
#include <limits>

namespace stagecraft::traces {

namespace {

Eigen::MatrixXd covariance_of(const Eigen::MatrixXd& J, double cost) {
  const Eigen::Index n = J.rows(), p = J.cols();
  const double s2 = n > p ? cost / static_cast<double>(n - p) : std::numeric_limits<double>::quiet_NaN();
  const Eigen::MatrixXd normal = J.transpose() * J;
  return s2 * normal.completeOrthogonalDecomposition().pseudoInverse();
}

}  // namespace

LinearFit nonnegative_least_squares(const Eigen::MatrixXd& A, const Eigen::VectorXd& b) {
  const int p = static_cast<int>(A.cols());
  LinearFit best;
  best.x = Eigen::VectorXd::Zero(p);
  best.cost = b.squaredNorm();
  int best_mask = 0;
  for (int mask = 1; mask < (1 << p); ++mask) {
    std::vector<int> cols;
    for (int j = 0; j < p; ++j) {
      if (mask & (1 << j)) cols.push_back(j);
    }
    Eigen::MatrixXd As(A.rows(), static_cast<Eigen::Index>(cols.size()));
    for (std::size_t k = 0; k < cols.size(); ++k) As.col(static_cast<Eigen::Index>(k)) = A.col(cols[k]);
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(As);
    if (qr.rank() < static_cast<Eigen::Index>(cols.size())) continue;
    const Eigen::VectorXd xs = qr.solve(b);
    if ((xs.array() < 0).any()) continue;
    const double cost = (As * xs - b).squaredNorm();
    if (cost < best.cost) {
      best.cost = cost;
      best.x.setZero();
      for (std::size_t k = 0; k < cols.size(); ++k) best.x(cols[k]) = xs(static_cast<Eigen::Index>(k));
      best_mask = mask;
    }
  }
  best.at_bound.assign(static_cast<std::size_t>(p), true);
  std::vector<int> free;
  for (int j = 0; j < p; ++j) {
    if (best_mask & (1 << j)) {
      best.at_bound[static_cast<std::size_t>(j)] = false;
      free.push_back(j);
    }
  }
  best.covariance = Eigen::MatrixXd::Zero(p, p);
  if (!free.empty()) {
    Eigen::MatrixXd Af(A.rows(), static_cast<Eigen::Index>(free.size()));
    for (std::size_t k = 0; k < free.size(); ++k) Af.col(static_cast<Eigen::Index>(k)) = A.col(free[k]);
    const Eigen::MatrixXd cov = covariance_of(Af, best.cost);
    for (std::size_t i = 0; i < free.size(); ++i) {
      for (std::size_t k = 0; k < free.size(); ++k) {
        best.covariance(free[i], free[k]) = cov(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k));
      }
    }
  }
  return best;
}

NonlinearFit levenberg_marquardt(const ResidualFunction& f, Eigen::VectorXd phi, int max_iterations, const Box* box) {
  const Eigen::Index p = phi.size();
  const auto project = [box](Eigen::VectorXd& x) {
    if (box) x = x.cwiseMax(box->lo).cwiseMin(box->hi);
  };
  // -1 / +1 where x sits on the box's lower / upper face
  const auto faces = [box, p](const Eigen::VectorXd& x) {
    std::vector<int> at(static_cast<std::size_t>(p), 0);
    if (!box) return at;
    for (Eigen::Index j = 0; j < p; ++j) at[static_cast<std::size_t>(j)] = x(j) <= box->lo(j) ? -1 : x(j) >= box->hi(j) ? 1 : 0;
    return at;
  };
  project(phi);
  Eigen::VectorXd r;
  Eigen::MatrixXd J;
  f(phi, r, &J);
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  NonlinearFit out;
  for (int it = 0; it < max_iterations; ++it) {
    out.iterations = it + 1;
    const Eigen::MatrixXd normal = J.transpose() * J;
    const Eigen::VectorXd gradient = J.transpose() * r;
    // held for this step: on a face with the descent direction (−gradient) pointing out of the box
    const std::vector<int> at = faces(phi);
    std::vector<Eigen::Index> free;
    for (Eigen::Index j = 0; j < p; ++j) {
      const int a = at[static_cast<std::size_t>(j)];
      if (!((a < 0 && gradient(j) > 0) || (a > 0 && gradient(j) < 0))) free.push_back(j);
    }
    const Eigen::Index nf = static_cast<Eigen::Index>(free.size());
    Eigen::VectorXd step = Eigen::VectorXd::Zero(p);
    if (nf > 0) {
      Eigen::MatrixXd damped(nf, nf);
      Eigen::VectorXd g(nf);
      for (Eigen::Index a = 0; a < nf; ++a) {
        g(a) = gradient(free[static_cast<std::size_t>(a)]);
        for (Eigen::Index b = 0; b < nf; ++b) damped(a, b) = normal(free[static_cast<std::size_t>(a)], free[static_cast<std::size_t>(b)]);
        damped(a, a) += lambda * std::max(damped(a, a), 1e-300);
      }
      const Eigen::VectorXd s = damped.ldlt().solve(-g);
      for (Eigen::Index a = 0; a < nf; ++a) step(free[static_cast<std::size_t>(a)]) = s(a);
    }
    Eigen::VectorXd trial = phi + step, r_trial;
    project(trial);
    step = trial - phi;   // what the projection left of it
    f(trial, r_trial, nullptr);
    const double trial_cost = r_trial.squaredNorm();
    if (std::isfinite(trial_cost) && trial_cost < cost) {
      const double change = (cost - trial_cost) / std::max(cost, 1e-300);
      phi = trial;
      cost = trial_cost;
      f(phi, r, &J);
      lambda = std::max(lambda / 3.0, 1e-12);
      if (step.lpNorm<Eigen::Infinity>() < 1e-12 || change < 1e-12) {
        out.converged = true;
        break;
      }
    } else {
      lambda *= 4.0;
      if (lambda > 1e12 || step.lpNorm<Eigen::Infinity>() < 1e-12) {
        out.converged = true;  // no step lowers the cost: a minimum to working precision
        break;
      }
    }
  }
  out.phi = phi;
  out.cost = cost;
  out.jacobian = J;
  out.covariance = covariance_of(J, cost);
  out.bound = faces(phi);
  return out;
}

int numerical_rank(const Eigen::MatrixXd& J, double rcond) {
  if (J.cols() == 0) return 0;
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(J);
  const Eigen::VectorXd s = svd.singularValues();
  int rank = 0;
  for (Eigen::Index i = 0; i < s.size(); ++i) rank += s(i) > rcond * s(0);
  return rank;
}

}  // namespace stagecraft::traces
