// Slot normalisers: turn a slot's surface text (as the caller said it, via ASR) into a canonical
// value. Pure functions of their input (and the call's reference time); thread-safe; they never
// throw on bad input: a value that cannot be normalised comes back with valid = false and an error
// that says what was expected. Errors never contain the phone or ID number itself (see base/pii.h).
//
// Common input handling for every normaliser: invalid UTF-8 gives valid = false; full-width ASCII
// forms (１３８, ＡＢＣ, U+3000 space) are folded to ASCII; spoken digits are read as digits where
// a type holds digit strings (零〇洞 0, 一幺 1, 二两 2, 三四五六七八九 3-9).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace hotline::nlu {

struct Normalized {
  // The canonical value. When the text could not be read at all, the raw text (trimmed); when it
  // was read but failed validation (bad check digit, unknown province), the read value, e.g. the 18
  // characters of an ID whose check digit does not match.
  std::string value;
  bool valid = true;
  std::string error;  // empty when valid; never echoes a phone or ID number
  // Per-type details, all strings:
  //   phone:     kind = mobile | landline | service | local (7-8 digits, no area code: valid=false)
  //              area_code (landline), extension (when "转123" followed)
  //   id_number: birth_date = YYYY-MM-DD, sex = male | female, legacy15 = true (upgraded 15-digit)
  //   time:      kind = datetime | date | month | year | week | duration,
  //              approx = true (vague period such as 中午, or 一个多月),
  //              period = early_morning | morning | forenoon | noon | afternoon | dusk | evening |
  //                       late_night (when a period word was said)
  //   amount:    approx = true (十几块, 三千多, 五百左右: the value is the stated lower bound)
  //   plate_number: kind = regular | new_energy | special
  std::map<std::string, std::string> extra;
};

// Asia/Shanghai: UTC+8 all year (no daylight saving since 1991), so a fixed offset is exact.
inline constexpr int kShanghaiUtcOffsetSeconds = 8 * 3600;

// Dispatch on the taxonomy slot id (config/taxonomy/hotline.yaml). Types without a normaliser
// (person_name, district, address, organization, bus_line, item, unknown ids) return the text
// unchanged (trimmed of surrounding whitespace) with valid = true; HasNormalizer() tells them
// apart so callers can leave Slot::normalized empty for them, as pipeline.h documents.
Normalized NormalizeSlot(std::string_view slot_type, std::string_view text,
                         std::chrono::system_clock::time_point reference_time);
bool HasNormalizer(std::string_view slot_type);

// phone: digits only. 11-digit mobiles 1[3-9]xxxxxxxxx; landlines with area code (010/02x + 8
// digits, 0[3-9]xx + 7-8 digits); service numbers (110, 12345, 95598, 400/800 numbers) valid;
// +86 / 0086 prefixes dropped (a landline after +86 gets its leading 0 back); 7-8 digit numbers
// without an area code are kept but flagged (kind = local, valid = false: a call-back needs the
// area code; the dialog should ask for it).
Normalized NormalizePhone(std::string_view text);

// id_number: 18 characters, 17 digits then a digit or X (x, 叉 accepted). GB 11643 check digit,
// province code (11-83) and birth date (YYYYMMDD, a real date from 1900, not after reference_time
// when given) validated; an invalid number keeps its 18 characters with valid = false and every
// failed check in the error ("check digit mismatch; ..."). A 15-digit first-generation number
// is upgraded to its 18-digit form (19 inserted before the year, check digit computed), valid,
// extra legacy15 = true.
Normalized NormalizeIdNumber(
    std::string_view text,
    std::optional<std::chrono::system_clock::time_point> reference_time = std::nullopt);

// time: absolute and relative expressions resolved against reference_time in Asia/Shanghai; the
// resolution rules (periods of the day, years left out, weeks) are documented at the top of
// time.cc.
// Values: "2026-11-30T22:00:00+08:00" (a time of day known), "2026-11-30" (a day), "2026-11"
// (上个月), "2026" (去年), "2026-W48" (上周), durations "P3D", "PT30M", "P1Y6M" (三天, 半个小时,
// 一年半). Unresolvable or vague (好几天, 前几天, 最近, ranges such as 两点到三点):
// valid = false, value = the raw text.
Normalized NormalizeTime(std::string_view text,
                         std::chrono::system_clock::time_point reference_time);

// amount: yuan as a decimal string without trailing zeros ("3500", "35000", "3.5", "0.5").
// Chinese numerals (incl. 两, 壹贰叁 financial forms, 一百八 = 180, 一万二 = 12000), Arabic numbers
// with thousands separators and decimals, 万/亿 multipliers, 元/块/圆 with 角/毛 and 分. Vague
// amounts (几百块) and other currencies are valid = false.
Normalized NormalizeAmount(std::string_view text);

// plate_number: upper case, spoken digits, no separators: 京a·12345 → 京A12345. Province
// abbreviation (31 provinces) + authority letter + 5 characters (regular) or 6 (new energy:
// 粤BD12345, 粤B12345D); special plates ending in 学/警/挂/领/使/港/澳 accepted.
Normalized NormalizePlateNumber(std::string_view text);

// order_id: upper case, spoken digits, whitespace and dashes removed; valid when 4-32 letters and
// digits with at least one digit: gd 2026 1128 001 → GD20261128001.
Normalized NormalizeOrderId(std::string_view text);

}  // namespace hotline::nlu
