// hotline chat [--server HOST:PORT | --model DIR] [--show-nlu] [--call-id ID] ...
// A call with the hotline from the terminal, as a caller would have it: each line read is one
// turn of what the caller says, and the hotline's reply is printed. The call ends when the dialog
// says it is over (a work order dispatched, a question answered and the caller done, a hand-off),
// or when the caller hangs up (end of input, or a line "/end"); the call's summary is printed then.
//
//   --server HOST:PORT   talk to a running `hotline serve` over gRPC (Converse, EndCall)
//   --model DIR          run the NLU and the dialog in this process instead
//   --show-nlu           after each reply, this turn's intent and slots as the NLU understood
//                        them, and the call's main intent, department and collected slots
//
// Output lines: "热线: <reply>" per turn; with --show-nlu "  [nlu] ..." and "  [call] ..."; at the
// end "[通话结束] outcome=... intent=... department=... work_order=... turns=N". The prompt
// "来电> " is written only when stdin is a terminal. Exit code 0 when the call ended normally,
// 1 on an error the call cannot go on from (server unreachable, bad options).
#ifdef HOTLINE_HAVE_DIALOG
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "cli/command.h"
#include "dialog/dialog.h"
#include "frontends/convert.h"
#include "frontends/hotline_grpc.h"
#include "nlu/json_io.h"
#include "nlu/pipeline.h"

namespace {

namespace v1 = hotline::v1;
using hotline::Code;
using hotline::Error;

struct Options {
  std::string server, model;
  std::string dialog_config = "config/dialog.yaml";
  std::string session_store, work_order_db;
  std::string call_id, reference_time;
  std::string backend = "cpu";
  bool show_nlu = false;
};

// One call, either over gRPC or in process. Turn/End throw hotline::Error with the server's code.
class Call {
 public:
  virtual ~Call() = default;
  virtual v1::ConverseResponse Turn(const std::string& text) = 0;
  virtual v1::EndCallResponse End() = 0;
};

Code FromGrpc(grpc::StatusCode c) { return static_cast<Code>(int(c)); }

class RemoteCall final : public Call {
 public:
  RemoteCall(const std::string& target, std::string call_id,
             std::optional<std::chrono::system_clock::time_point> ref)
      : stub_(
            v1::Hotline::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        call_id_(std::move(call_id)),
        ref_(ref),
        target_(target) {}

  v1::ConverseResponse Turn(const std::string& text) override {
    v1::ConverseRequest req;
    req.set_call_id(call_id_);
    req.set_text(text);
    if (ref_) {
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(ref_->time_since_epoch()).count();
      req.mutable_reference_time()->set_seconds(ns / 1000000000);
      req.mutable_reference_time()->set_nanos(int(ns % 1000000000));
    }
    v1::ConverseResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Check(stub_->Converse(&ctx, req, &resp));
    return resp;
  }

  v1::EndCallResponse End() override {
    v1::EndCallRequest req;
    req.set_call_id(call_id_);
    v1::EndCallResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Check(stub_->EndCall(&ctx, req, &resp));
    return resp;
  }

 private:
  void Check(const grpc::Status& s) {
    if (s.ok()) return;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      throw Error("the hotline server at " + target_ + " did not answer: " + s.error_message(),
                  FromGrpc(s.error_code()));
    }
    throw Error(s.error_message(), FromGrpc(s.error_code()));
  }

  std::unique_ptr<v1::Hotline::Stub> stub_;
  std::string call_id_;
  std::optional<std::chrono::system_clock::time_point> ref_;
  std::string target_;
};

class LocalCall final : public Call {
 public:
  LocalCall(const Options& o, std::optional<std::chrono::system_clock::time_point> ref)
      : call_id_(o.call_id), ref_(ref) {
    namespace nlu = hotline::nlu;
    const nlu::ModelConfig mc = nlu::ModelConfig::Load(o.model);
    if (mc.kind != "joint")
      throw Error("'" + o.model + "' is a " + mc.kind +
                  " model; the dialog needs a joint (intent + slots) model such as models/default");
    nlu::PipelineOptions popts;
    popts.precision = hotline::engine::ParsePrecision(mc.precision);
    popts.backend = hotline::engine::ParseBackend(o.backend);
    pipeline_ = nlu::Pipeline::Open(o.model, popts);
    hotline::dialog::DialogConfig config = hotline::dialog::DialogConfig::Load(o.dialog_config);
    const std::string threshold_line = config.ApplyModelThreshold(mc.handoff_threshold);
    if (config.min_confidence_from_model) std::cerr << threshold_line << "\n";
    if (!o.session_store.empty()) config.session_store = o.session_store;
    if (!o.work_order_db.empty()) config.work_order_db = o.work_order_db;
    manager_ = hotline::dialog::DialogManager::Create(config, pipeline_->taxonomy());
  }

  v1::ConverseResponse Turn(const std::string& text) override {
    if (text.empty()) throw Error("text is empty; a turn needs what the caller said");
    const auto now = ref_.value_or(std::chrono::system_clock::now());
    hotline::frontends::ConverseResult r;
    r.understanding = pipeline_->Understand({text}, now).at(0);
    r.reply = manager_->Turn(call_id_, text, r.understanding, now);
    r.action = std::string(hotline::dialog::ActionName(r.reply.action));
    v1::ConverseResponse out;
    hotline::frontends::ToProto(r, &out);
    return out;
  }

  v1::EndCallResponse End() override {
    v1::EndCallResponse out;
    hotline::frontends::ToProto(manager_->EndCall(call_id_), &out);
    return out;
  }

 private:
  std::string call_id_;
  std::optional<std::chrono::system_clock::time_point> ref_;
  std::unique_ptr<hotline::nlu::Pipeline> pipeline_;
  std::unique_ptr<hotline::dialog::DialogManager> manager_;
};

template <typename Slots>
std::string SlotsText(const Slots& slots) {
  std::string out;
  for (const auto& s : slots) {
    if (!out.empty()) out += ", ";
    out += s.type() + "=" + s.value();
    if (!s.normalized().empty() && s.normalized() != s.value()) out += " → " + s.normalized();
  }
  return out.empty() ? "(none)" : out;
}

void PrintTurn(const v1::ConverseResponse& r, bool show_nlu) {
  std::cout << "热线: " << r.reply() << "\n";
  if (show_nlu) {
    const auto& u = r.understanding();
    char conf[32];
    std::snprintf(conf, sizeof conf, "%.2f", u.confidence());
    std::cout << "  [nlu] intent=" << u.intent() << " (" << conf << ")"
              << " slots: " << SlotsText(u.slots()) << "\n";
    std::cout << "  [call] action=" << r.action() << " intent=" << r.intent()
              << " department=" << r.department() << " slots: " << SlotsText(r.slots());
    if (!r.work_order_id().empty()) std::cout << " work_order=" << r.work_order_id();
    std::cout << "\n";
  }
  std::cout.flush();
}

void PrintSummary(const v1::EndCallResponse& s) {
  std::cout << "[通话结束] outcome=" << s.outcome() << " intent=" << s.intent()
            << " department=" << s.department()
            << " work_order=" << (s.work_order_id().empty() ? "-" : s.work_order_id())
            << " turns=" << s.turns() << "\n";
  std::cout.flush();
}

int RunChat(const Options& o) {
  const bool tty = isatty(STDIN_FILENO);
  std::optional<std::chrono::system_clock::time_point> ref;
  if (!o.reference_time.empty()) {
    ref = hotline::nlu::ParseIsoTime(o.reference_time);
    if (!ref) {
      throw Error("--reference-time must be ISO-8601 like 2026-11-28T22:00:00+08:00; got '" +
                  o.reference_time + "'");
    }
  }
  std::unique_ptr<Call> call;
  if (!o.server.empty()) {
    call = std::make_unique<RemoteCall>(o.server, o.call_id, ref);
  } else {
    if (tty) std::cerr << "chat: loading " << o.model << " ...\n";
    call = std::make_unique<LocalCall>(o, ref);
  }
  std::cout << "热线: 您好，这里是12345市民服务热线，请问有什么可以帮您？\n";
  std::cout.flush();
  bool any_turn = false;
  std::string line;
  for (;;) {
    if (tty) std::cout << "来电> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/end" || line == "/quit") break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // silence: no turn
    v1::ConverseResponse r;
    try {
      r = call->Turn(line);
    } catch (const Error& e) {
      // Bad input (e.g. not UTF-8) loses only that turn; a server that is gone ends the chat.
      if (e.code() != Code::kInvalidArgument) throw;
      std::cout << "[错误] " << e.what() << "\n" << std::flush;
      continue;
    }
    any_turn = true;
    PrintTurn(r, o.show_nlu);
    if (r.done()) break;
  }
  if (!any_turn) {
    std::cout << "[通话结束] 未通话\n";
    return 0;
  }
  PrintSummary(call->End());
  return 0;
}

hotline::cli::Registrar reg(
    "chat", "A call with the hotline's dialog from the terminal (in process or via a server)",
    [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      auto* server =
          app.add_option("--server", o->server, "HOST:PORT of a running `hotline serve` (gRPC)");
      auto* model =
          app.add_option("--model", o->model, "model folder: run NLU and dialog in this process");
      server->excludes(model);
      app.add_flag("--show-nlu", o->show_nlu, "show each turn's intent and slots");
      app.add_option("--call-id", o->call_id, "call id (default: chat-<pid>-<time>)");
      app.add_option("--reference-time", o->reference_time,
                     "ISO-8601 time that resolves relative times (default: now)");
      app.add_option("--dialog-config", o->dialog_config,
                     "dialog config for --model (default config/dialog.yaml)");
      app.add_option("--session-store", o->session_store,
                     "with --model: memory or redis://host:port[/db] (default: the config's)");
      app.add_option("--work-order-db", o->work_order_db,
                     "with --model: SQLite work-order file (default: the config's)");
      app.add_option("--backend", o->backend, "with --model: cpu|cuda");
      return [o]() -> int {
        if (o->server.empty() && o->model.empty()) {
          throw Error("give --server HOST:PORT (a running hotline serve) or --model DIR");
        }
        if (o->call_id.empty()) {
          o->call_id = "chat-" + std::to_string(getpid()) + "-" +
                       std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
        }
        return RunChat(*o);
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_DIALOG
