// How much of each event the page can hold: whole, cut to its kind and source, or not at all, so
// that a session of any length makes a page of bounded size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cordon::launcher::report {

enum class Fit : uint8_t { Whole, Brief, Omitted };

struct EventCost {
  size_t whole = 0, brief = 0;  // bytes in the page either way
  bool notable = false;         // a refusal, an alert, a process record: kept whole first
};

// Fits the events into `budget` bytes. Every event whole if they fit; else notable events whole
// and ordinary ones brief, then as many ordinary ones (in order) made whole again as the rest of
// the budget allows; and only when not even that fits, notable events first (whole, else brief),
// then ordinary ones brief in order until the budget is spent, the rest left out.
std::vector<Fit> fit_events(const std::vector<EventCost>& costs, size_t budget);

}  // namespace cordon::launcher::report
