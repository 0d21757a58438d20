#include "frontends/convert.h"

namespace hotline::frontends {
namespace {

std::optional<std::chrono::system_clock::time_point> FromTimestamp(
    bool has, const google::protobuf::Timestamp& ts) {
  if (!has) return std::nullopt;
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(ts.seconds()) + std::chrono::nanoseconds(ts.nanos())));
}

template <typename Repeated>
void AddSlots(const std::vector<dialog::SlotFill>& slots, Repeated* out) {
  for (const auto& s : slots) {
    auto* p = out->Add();
    p->set_type(s.type);
    p->set_value(s.value);
    p->set_normalized(s.normalized);
  }
}

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

void ToProto(const nlu::Understanding& u, hotline::v1::Understanding* out) {
  out->set_intent(u.intent);
  out->set_confidence(u.confidence);
  for (const auto& s : u.top_k) {
    auto* p = out->add_top_k();
    p->set_intent(s.intent);
    p->set_probability(s.probability);
  }
  for (const auto& s : u.slots) {
    auto* p = out->add_slots();
    p->set_type(s.type);
    p->set_start(s.start);
    p->set_end(s.end);
    p->set_value(s.value);
    p->set_normalized(s.normalized);
    p->set_valid(s.valid);
  }
  out->set_department(u.department);
  out->set_business_line(u.business_line);
  out->set_category(u.category);
  out->set_category_name(u.category_name);
  out->set_truncated(u.truncated);
  out->set_num_tokens(u.num_tokens);
  for (const auto& h : u.heads) {
    auto* p = out->add_heads();
    p->set_head(h.head);
    p->set_label(h.label);
    p->set_score(h.score);
    for (const auto& t : h.top_k) {
      auto* s = p->add_top_k();
      s->set_label(t.label);
      s->set_score(t.score);
    }
  }
}

void ToProto(const serving::ModelStatus& m, hotline::v1::ModelInfo* out) {
  out->set_name(m.name);
  out->set_version(m.version);
  for (const auto& v : m.versions) out->add_versions(v);
  out->set_state(std::string(serving::ModelStateName(m.state)));
  out->set_message(m.message);
  out->set_memory_bytes(m.memory_bytes);
  for (const auto& b : m.business_lines) out->add_business_lines(b);
  out->set_kind(m.kind);
  for (const auto& h : m.heads) out->add_heads(h);
}

void ToProto(const serving::UnderstandReply& r, hotline::v1::ServingInfo* out) {
  out->set_model_name(r.model_name);
  out->set_model_version(r.model_version);
  out->set_queue_time_ms(r.queue_seconds * 1000);
  out->set_compute_time_ms(r.compute_seconds * 1000);
}

serving::UnderstandCall FromProto(const hotline::v1::UnderstandRequest& req) {
  serving::UnderstandCall c;
  c.texts.push_back(req.text());
  c.model = req.model();
  c.business_line = req.business_line();
  c.request_id = req.request_id();
  c.reference_time = FromTimestamp(req.has_reference_time(), req.reference_time());
  return c;
}

serving::UnderstandCall FromProto(const hotline::v1::UnderstandBatchRequest& req) {
  serving::UnderstandCall c;
  c.texts.assign(req.texts().begin(), req.texts().end());
  c.model = req.model();
  c.business_line = req.business_line();
  c.request_id = req.request_id();
  c.reference_time = FromTimestamp(req.has_reference_time(), req.reference_time());
  return c;
}

ConverseCall FromProto(const hotline::v1::ConverseRequest& req) {
  ConverseCall c;
  c.call_id = req.call_id();
  c.text = req.text();
  c.reference_time = FromTimestamp(req.has_reference_time(), req.reference_time());
  return c;
}

void ToProto(const ConverseResult& r, hotline::v1::ConverseResponse* out) {
  out->set_reply(r.reply.reply);
  out->set_action(r.action);
  out->set_intent(r.reply.intent);
  out->set_department(r.reply.department);
  AddSlots(r.reply.slots, out->mutable_slots());
  out->set_work_order_id(r.reply.work_order_id);
  out->set_done(r.reply.done);
  ToProto(r.understanding, out->mutable_understanding());
  for (const auto& a : r.reply.acts) out->add_acts(a);
  for (const auto& c : r.reply.corrected) out->add_corrected(c);
  out->set_transfer_to(r.reply.transfer_to);
  out->set_merged(r.reply.merged);
}

void ToProto(const dialog::CallSummary& s, hotline::v1::EndCallResponse* out) {
  out->set_call_id(s.call_id);
  out->set_outcome(s.outcome);
  out->set_intent(s.intent);
  out->set_department(s.department);
  out->set_category(s.category);
  out->set_category_name(s.category_name);
  AddSlots(s.slots, out->mutable_slots());
  out->set_work_order_id(s.work_order_id);
  out->set_turns(s.turns);
  for (const auto& i : s.issues) {
    auto* p = out->add_issues();
    p->set_intent(i.intent);
    p->set_kind(i.kind);
    p->set_department(i.department);
    p->set_outcome(i.outcome);
    p->set_work_order_id(i.work_order_id);
    p->set_transfer_to(i.transfer_to);
    AddSlots(i.slots, p->mutable_slots());
  }
}

void ToProto(const dialog::WorkOrder& w, hotline::v1::WorkOrder* out) {
  out->set_id(w.id);
  out->set_call_id(w.call_id);
  out->set_department(w.department);
  out->set_intent(w.intent);
  out->set_caller_text(w.caller_text);
  out->set_created_at(w.created_at);
  out->set_status(w.status);
  AddSlots(w.slots, out->mutable_slots());
  for (const auto& t : w.urged_at) out->add_urged_at(t);
  out->set_summary(w.summary);
  for (const auto& u : w.unverified) out->add_unverified(u);
  for (const auto& c : w.linked_calls) out->add_linked_calls(c);
  for (const auto& n : w.notes) {
    auto* note = out->add_notes();
    note->set_at(n.at);
    note->set_by(n.by);
    note->set_text(n.text);
    note->set_status(n.status);
  }
  out->set_updated_at(w.updated_at);
}

std::string TraceIdOf(std::string_view tp) {
  // version "-" trace-id "-" parent-id "-" flags; a later version may append "-" fields.
  if (tp.size() < 55 || (tp.size() > 55 && tp[55] != '-')) return "";
  auto hex = [&](size_t from, size_t n) {
    bool nonzero = false;
    for (size_t i = from; i < from + n; ++i) {
      const char c = tp[i];
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
      nonzero = nonzero || c != '0';
    }
    return nonzero || n <= 2;
  };
  if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return "";
  if (!hex(0, 2) || tp.substr(0, 2) == "ff" || !hex(3, 32) || !hex(36, 16) || !hex(53, 2))
    return "";
  if (tp.substr(0, 2) == "00" && tp.size() != 55) return "";
  return std::string(tp.substr(3, 32));
}

dialog::OrderQuery FromProto(const hotline::v1::ListWorkOrdersRequest& r) {
  dialog::OrderQuery q;
  q.status = r.status();
  q.department = r.department();
  q.intent = r.intent();
  q.text = r.text();
  q.created_from = r.created_from();
  q.created_to = r.created_to();
  q.limit = r.limit() == 0 ? 50 : r.limit();
  q.offset = r.offset();
  return q;
}

serving::TimePoint SteadyDeadline(std::chrono::system_clock::time_point deadline) {
  const auto now_wall = std::chrono::system_clock::now();
  // gRPC reports "no deadline" as a far-future time; anything beyond a day is treated as none.
  if (deadline - now_wall > std::chrono::hours(24)) return serving::TimePoint::max();
  return serving::Clock::now() + std::chrono::duration_cast<serving::Duration>(deadline - now_wall);
}

}  // namespace hotline::frontends
