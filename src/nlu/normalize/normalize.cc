#include "nlu/normalize/normalize.h"

#include "nlu/normalize/text_util.h"

namespace hotline::nlu {

bool HasNormalizer(std::string_view slot_type) {
  return slot_type == "phone" || slot_type == "id_number" || slot_type == "time" ||
         slot_type == "amount" || slot_type == "plate_number" || slot_type == "order_id";
}

Normalized NormalizeSlot(std::string_view slot_type, std::string_view text,
                         std::chrono::system_clock::time_point reference_time) {
  if (slot_type == "phone") return NormalizePhone(text);
  if (slot_type == "id_number") return NormalizeIdNumber(text, reference_time);
  if (slot_type == "time") return NormalizeTime(text, reference_time);
  if (slot_type == "amount") return NormalizeAmount(text);
  if (slot_type == "plate_number") return NormalizePlateNumber(text);
  if (slot_type == "order_id") return NormalizeOrderId(text);
  Normalized n;
  n.value = internal::TrimmedRaw(text);
  return n;
}

}  // namespace hotline::nlu
