// Seams for tests: a manager over stores the test built (a memory store with a fake clock, a
// work-order store it reopens).
#pragma once

#include <memory>

#include "dialog/dialog.h"
#include "dialog/session_store.h"
#include "dialog/work_order_store.h"

namespace hotline::dialog {

std::unique_ptr<SessionStore> NewSessionStore(const DialogConfig& config);
std::unique_ptr<DialogManager> NewDialogManager(const DialogConfig& config,
                                                const nlu::Taxonomy& taxonomy,
                                                std::unique_ptr<SessionStore> sessions,
                                                std::unique_ptr<WorkOrderStore> orders);

}  // namespace hotline::dialog
