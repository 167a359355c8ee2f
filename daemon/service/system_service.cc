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

void AddComponent(google::protobuf::RepeatedPtrField<v1::Component>* out, const char* name,
                  const ComponentStatus& s) {
  v1::Component* c = out->Add();
  c->set_name(name);
  switch (s.state) {
    case ComponentState::kLoading: c->set_state(v1::COMPONENT_STATE_LOADING); break;
    case ComponentState::kReady: c->set_state(v1::COMPONENT_STATE_READY); break;
    case ComponentState::kFailed: c->set_state(v1::COMPONENT_STATE_FAILED); break;
    case ComponentState::kDisabled: c->set_state(v1::COMPONENT_STATE_DISABLED); break;
  }
  c->set_message(s.message);
  c->set_ready_after_ns(s.ready_after_ns);
}

void AddComponents(const Components& parts,
                   google::protobuf::RepeatedPtrField<v1::Component>* out) {
  ComponentStatus inj = parts.injector_status();
  if (const Injector* i = parts.injector()) {  // which hook programs are loaded so far
    std::string loaded;
    for (const ProgLoadStats& p : i->LoadedPrograms())
      loaded += (loaded.empty() ? "" : ", ") + p.name + " (" + std::to_string(p.verified_insns) +
                " insns verified, " + std::to_string(p.load_ns / 1000000) + " ms)";
    inj.message += "; loaded: " + (loaded.empty() ? std::string("none yet") : loaded);
  }
  AddComponent(out, "injector", inj);
  AddComponent(out, "observer", parts.observer_status());
}
}  // namespace

grpc::ServerUnaryReactor* SystemService::GetCapabilities(grpc::CallbackServerContext* ctx,
                                                         const v1::GetCapabilitiesRequest*,
                                                         v1::Capabilities* resp) {
  AddComponents(*parts_, resp->mutable_components());
  resp->set_max_rules(parts_->limits().max_rules);
  resp->set_max_ttl_ns(parts_->limits().max_ttl_ns);
  resp->set_default_ttl_ns(parts_->limits().default_ttl_ns);
  const ApiLimits& api = parts_->api();
  v1::Limits* l = resp->mutable_limits();
  l->set_max_streams(api.streams.max_streams);
  l->set_max_streams_per_kind(api.streams.max_streams_per_kind);
  l->set_max_queue(api.streams.max_queue);
  l->set_max_stream_memory_bytes(api.streams.max_queue_bytes);
  l->set_max_filters(api.max_filters);
  l->set_max_labels(api.max_labels);
  l->set_max_label_bytes(api.max_label_bytes);
  l->set_max_batch(api.max_batch);
  l->set_max_message_bytes(api.max_message_bytes);
  if (parts_->injector()) {  // its probe ran before it was published
    Capabilities caps = parts_->caps();
    resp->set_kernel(caps.kernel);
    resp->set_btf(caps.btf);
    std::string notes;
    for (const auto& n : caps.notes) notes += (notes.empty() ? "" : "; ") + n;
    AddHook(resp, "xdp", caps.xdp, "the kernel refuses XDP programs", false);
    AddHook(resp, "tcx", caps.tcx, notes, false);
    AddHook(resp, "clsact", caps.clsact, notes, false);
    AddHook(resp, "cgroup_skb", caps.cgroup_skb && !caps.cgroup2.empty(),
            caps.cgroup2.empty() ? "no cgroup v2 mount" : "the kernel refuses cgroup_skb programs",
            false);
    resp->set_cgroup2_mount(caps.cgroup2);
  }
  ComponentStatus os = parts_->observer_status();
  if (Observer* obs = parts_->observer()) {
    for (const auto& h : obs->hooks()) AddHook(resp, h.name, h.attached, h.error, true);
    resp->mutable_stall_threshold()->set_min_ns(obs->stall_min_ns());
    resp->mutable_stall_threshold()->set_rtts(obs->stall_rtts());
  } else if (os.state != ComponentState::kLoading) {
    AddHook(resp, "observer", false, os.message, true);
  }
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* SystemService::GetHealth(grpc::CallbackServerContext* ctx,
                                                   const v1::GetHealthRequest*, v1::Health* resp) {
  resp->set_serving(true);
  AddComponents(*parts_, resp->mutable_components());
  if (const Injector* inj = parts_->injector()) {
    resp->set_rules(static_cast<uint32_t>(inj->LiveCount()));
    resp->set_lease_remaining_ns(inj->LeaseRemainingNs());
  }
  if (Observer* obs = parts_->observer())
    resp->set_events_lost_kernel(obs->Totals().counters[OBS_CNT_RING_LOST]);
  resp->set_subscribers(static_cast<uint32_t>(observer_->subscribers()));
  resp->set_streams(parts_->streams().open());
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* SystemService::GetVersion(grpc::CallbackServerContext* ctx,
                                                    const v1::GetVersionRequest*,
                                                    v1::Version* resp) {
  resp->set_version(LOSSD_VERSION);
  resp->set_api("lossd.v1");
  return Reply(ctx, Status::Ok());
}

}  // namespace lossd
