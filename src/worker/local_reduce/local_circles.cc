#include "worker/local_reduce/local_circles.h"

#include <fmt/format.h>

namespace byteps::worker::local_reduce {

SwitchLayout LayoutSwitches(int local_rank, int local_size, int configured, int detected, std::string* warning) {
  SwitchLayout l;
  int size = configured > 0 ? configured : detected;
  if (size <= 0 || size >= local_size || local_size % size != 0) {
    if (configured > 0 && configured < local_size && warning) {
      *warning = fmt::format("BYTEPS_PCIE_SWITCH_SIZE={} does not divide BYTEPS_LOCAL_SIZE={}: unbalanced switches "
                             "are not supported, so the host's {} processes reduce as one switch",
                             configured, local_size, local_size);
    }
    size = local_size;
  }
  l.switch_size = size;
  l.switches = local_size / size;
  l.index = local_rank / size;
  l.place = local_rank % size;
  return l;
}

StatusOr<std::unique_ptr<LocalCircles>> LocalCircles::Start(const LocalOptions& base, const SwitchLayout& layout,
                                                            Done on_failure) {
  std::unique_ptr<LocalCircles> c(new LocalCircles());
  c->layout_ = layout;
  auto all = LocalReducer::Start(base, on_failure);
  if (!all.ok()) return all.status();
  c->all_ = std::move(all.value());
  if (!layout.cross()) return c;
  const auto fail_all = [&c](const Status& st) {
    c->all_->FailAll(st);  // the local non-roots learn why
    return st;
  };
  LocalOptions sw = base;
  sw.circle = fmt::format("sw{}", layout.index);
  sw.local_rank = layout.place;
  sw.local_size = layout.switch_size;
  sw.members.clear();
  for (int p = 0; p < layout.switch_size; ++p) sw.members.push_back(layout.index * layout.switch_size + p);
  auto s = LocalReducer::Start(sw, on_failure);
  if (!s.ok()) return fail_all(s.status().WithContext(fmt::format("PCIe switch {}", layout.index)));
  c->switch_ = std::move(s.value());
  if (!layout.switch_root()) return c;
  LocalOptions x = base;
  x.circle = "x";
  x.local_rank = layout.index;
  x.local_size = layout.switches;
  x.members.clear();
  for (int j = 0; j < layout.switches; ++j) x.members.push_back(j * layout.switch_size + layout.switch_size - 1);
  auto r = LocalReducer::Start(x, on_failure);
  if (!r.ok()) return fail_all(r.status().WithContext("the PCIe switches' roots"));
  c->cross_ = std::move(r.value());
  return c;
}

void LocalCircles::FailAll(const Status& st) {
  for (auto* r : {all_.get(), switch_.get(), cross_.get()})
    if (r) r->FailAll(st);
}

Status LocalCircles::failure() const {
  for (auto* r : {all_.get(), switch_.get(), cross_.get()})
    if (r && !r->failure().ok()) return r->failure();
  return Status::Ok();
}

void LocalCircles::Leave() {
  for (auto* r : {all_.get(), switch_.get(), cross_.get()})
    if (r) r->Leave();
}

void LocalCircles::Close() {
  for (auto* r : {cross_.get(), switch_.get(), all_.get()})
    if (r) r->Close();
}

}  // namespace byteps::worker::local_reduce
