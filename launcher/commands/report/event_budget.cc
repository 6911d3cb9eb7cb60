// The page's event budget, decided over the whole session at once.
#include "launcher/commands/report/event_budget.h"

namespace cordon::launcher::report {

std::vector<Fit> fit_events(const std::vector<EventCost>& costs, size_t budget) {
  const size_t n = costs.size();
  size_t all_whole = 0, base = 0;
  for (const auto& c : costs) {
    all_whole += c.whole;
    base += c.notable ? c.whole : c.brief;
  }
  if (all_whole <= budget) {
    return std::vector<Fit>(n, Fit::Whole);
  }
  std::vector<Fit> fit(n, Fit::Omitted);
  if (base <= budget) {
    size_t left = budget - base;
    for (size_t i = 0; i < n; ++i) {
      const auto& c = costs[i];
      fit[i] = c.notable ? Fit::Whole : Fit::Brief;
      if (!c.notable && c.whole >= c.brief && c.whole - c.brief <= left) {
        fit[i] = Fit::Whole;
        left -= c.whole - c.brief;
      }
    }
    return fit;
  }
  size_t used = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& c = costs[i];
    if (c.notable && used + c.whole <= budget) {
      fit[i] = Fit::Whole;
      used += c.whole;
    } else if (c.notable && used + c.brief <= budget) {
      fit[i] = Fit::Brief;
      used += c.brief;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!costs[i].notable && used + costs[i].brief <= budget) {
      fit[i] = Fit::Brief;
      used += costs[i].brief;
    }
  }
  return fit;
}

}  // namespace cordon::launcher::report
