#include "service/convert.h"
#include "service/services.h"

namespace lossd {

namespace {
void AddHook(v1::Capabilities* c, const std::string& name, bool ok, const std::string& why,
          bool observer) {
  v1::HookAvailability* h = observer ? c->add_observer_hooks() : c->add_injector_hooks();
  h->set_name(name);
  h->set_available(ok);
  if (!ok) h->set_reason(why);
}
}  // namespace

grpc::ServerUnaryReactor* SystemService::GetCapabilities(grpc::CallbackServerContext* ctx,
                                                         const v1::GetCapabilitiesRequest*,
                                                         v1::Capabilities* resp) {
  resp->set_kernel(caps_.kernel);
  resp->set_btf(caps_.btf);
  std::string notes;
  for (const auto& n : caps_.notes) notes += (notes.empty() ? "" : "; ") + n;
  AddHook(resp, "xdp", caps_.xdp, "the kernel refuses XDP programs", false);
  AddHook(resp, "tcx", caps_.tcx, notes, false);
  AddHook(resp, "clsact", caps_.clsact, notes, false);
  AddHook(resp, "cgroup_skb", caps_.cgroup_skb && !caps_.cgroup2.empty(),
       caps_.cgroup2.empty() ? "no cgroup v2 mount" : "the kernel refuses cgroup_skb programs", false);
  if (obs_) {
    for (const auto& h : obs_->hooks()) AddHook(resp, h.name, h.attached, h.error, true);
  } else {
    AddHook(resp, "observer", false, observer_error_, true);
  }
  resp->set_cgroup2_mount(caps_.cgroup2);
  resp->set_max_rules(inj_->limits().max_rules);
  resp->set_max_ttl_ns(inj_->limits().max_ttl_ns);
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* SystemService::GetHealth(grpc::CallbackServerContext* ctx,
                                                   const v1::GetHealthRequest*, v1::Health* resp) {
  resp->set_serving(true);
  resp->set_rules(static_cast<uint32_t>(inj_->LiveCount()));
  resp->set_lease_remaining_ns(inj_->LeaseRemainingNs());
  if (obs_) resp->set_events_lost_kernel(obs_->Totals().counters[OBS_CNT_RING_LOST]);
  resp->set_subscribers(static_cast<uint32_t>(observer_->subscribers()));
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* SystemService::GetVersion(grpc::CallbackServerContext* ctx,
                                                    const v1::GetVersionRequest*, v1::Version* resp) {
  resp->set_version(LOSSD_VERSION);
  resp->set_api("lossd.v1");
  return Reply(ctx, Status::Ok());
}

}  // namespace lossd
