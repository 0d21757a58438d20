#include "dialog/dialog.h"

#include "base/error.h"

namespace hotline::dialog {

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kGreet:
      return "greet";
    case Action::kAskSlot:
      return "ask_slot";
    case Action::kConfirm:
      return "confirm";
    case Action::kAnswer:
      return "answer";
    case Action::kDispatch:
      return "dispatch";
    case Action::kHandoff:
      return "handoff";
    case Action::kClarify:
      return "clarify";
    case Action::kEnd:
      return "end";
    case Action::kTransfer:
      return "transfer";
  }
  return "clarify";
}

}  // namespace hotline::dialog
