// The dialog policy through DialogManager (in-memory sessions, a fresh SQLite file), with
// hand-built NLU results, so each test states exactly what the caller "said".
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "base/error.h"
#include "dialog/acts.h"
#include "dialog/dialog.h"
#include "dialog/manager_internal.h"
#include "dialog/session.h"
#include "dialog/texts.h"
#include "test_util.h"

namespace hotline::dialog {
namespace {

using testing::Dec1;
using testing::S;
using testing::U;

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::TestConfig(::testing::UnitTest::GetInstance()->current_test_info()->name());
    Make();
  }
  void Make() { dm_ = DialogManager::Create(config_, testing::TheTaxonomy()); }
  TurnReply T(const std::string& text, const nlu::Understanding& u,
              const std::string& call = "c1") {
    return dm_->Turn(call, text, u, Dec1());
  }
  static std::string Slot(const TurnReply& r, const std::string& type) {
    for (const auto& s : r.slots)
      if (s.type == type) return s.value;
    return "<none>";
  }

  DialogConfig config_;
  std::unique_ptr<DialogManager> dm_;
};

TEST_F(PolicyTest, DispatchAsksMissingSlotReadsBackAndCreatesOrderOnAffirm) {
  TurnReply r = T("喂你好", U("greeting", 0.95f));
  EXPECT_EQ(r.action, Action::kGreet);
  EXPECT_EQ(r.intent, "");
  EXPECT_FALSE(r.done);

  r = T("我家停水了", U("water_outage", 0.9f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_EQ(r.intent, "water_outage");
  EXPECT_EQ(r.department, "water");
  EXPECT_NE(r.reply.find("位置"), std::string::npos) << r.reply;  // prompts.address

  r = T("天河区荷光路南一巷12号",
        U("provide_info", 0.8f, {{"district", "天河区"}, {"address", "荷光路南一巷12号"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.reply,
            "您反映的是天河区荷光路南一巷12号停水的问题，我们将转交自来水公司处理，对吗？");
  EXPECT_EQ(Slot(r, "address"), "荷光路南一巷12号");
  EXPECT_EQ(r.work_order_id, "");

  r = T("对的", U("affirm", 0.97f));
  EXPECT_EQ(r.action, Action::kDispatch);
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(std::regex_match(r.work_order_id, std::regex("WO20261201-\\d{6}")))
      << r.work_order_id;
  EXPECT_NE(r.reply.find(r.work_order_id), std::string::npos);
  EXPECT_NE(r.reply.find("自来水公司"), std::string::npos);

  auto order = dm_->GetWorkOrder(r.work_order_id);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->intent, "water_outage");
  EXPECT_EQ(order->department, "water");
  EXPECT_EQ(order->call_id, "c1");
  EXPECT_EQ(order->status, "open");
  EXPECT_EQ(order->created_at, "2026-12-01T02:00:00Z");
  EXPECT_EQ(order->caller_text, "喂你好\n我家停水了\n天河区荷光路南一巷12号\n对的");
  ASSERT_EQ(order->slots.size(), 2u);
  EXPECT_EQ(order->slots[0].type, "district");
  EXPECT_EQ(order->slots[1].value, "荷光路南一巷12号");

  const CallSummary sum = dm_->EndCall("c1");
  EXPECT_EQ(sum.outcome, "dispatch");
  EXPECT_EQ(sum.intent, "water_outage");
  EXPECT_EQ(sum.department, "water");
  EXPECT_EQ(sum.work_order_id, r.work_order_id);
  EXPECT_EQ(sum.turns, 4);
  // The session is gone after EndCall.
  EXPECT_THROW(dm_->EndCall("c1"), Error);
}

TEST_F(PolicyTest, OrderIdsCountUpAndNormalisedValuesAreKept) {
  std::string first;
  for (int i = 0; i < 3; ++i) {
    const std::string call = "n" + std::to_string(i);
    // Three places: the same place again would join the first order (并单).
    T("工地半夜施工太吵了",
      U("construction_noise", 0.9f,
        {{"address", "建国路8" + std::to_string(i) + "号"},
         {"time", "昨天晚上十一点", "2026-11-30T23:00:00+08:00"}}),
      call);
    TurnReply r = T("是的", U("affirm", 0.9f), call);
    ASSERT_EQ(r.action, Action::kDispatch);
    if (i == 0) first = r.work_order_id;
    EXPECT_EQ(r.work_order_id, "WO20261201-00000" + std::to_string(i + 1));
  }
  auto o = dm_->GetWorkOrder("wo20261201000001");  // as the order_id normaliser writes it
  ASSERT_TRUE(o);
  EXPECT_EQ(o->id, first);
  ASSERT_EQ(o->slots.size(), 2u);
  EXPECT_EQ(o->slots[1].normalized, "2026-11-30T23:00:00+08:00");
  EXPECT_FALSE(dm_->GetWorkOrder("WO20261201-000009"));
}

TEST_F(PolicyTest, RequiredSlotsAreAskedInOrderAndOnlyWhenMissing) {
  // social_insurance_payment requires id_number (taxonomy); this answers dir adds district.
  const std::string dir = testing::TempDir("answers-order");
  for (const auto& e : std::filesystem::directory_iterator(config_.answers_dir))
    std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string());
  {
    std::ofstream f(dir + "/social_insurance_payment.yaml");
    f << "intent: social_insurance_payment\nrequires: [district]\nanswers:\n"
         "  - text: \"{district}参保人（尾号{id_number|tail4}）的缴费记录可在官方应用查询。\"\n";
  }
  config_.answers_dir = dir;
  Make();
  TurnReply r = T("我想查一下社保缴费记录", U("social_insurance_payment", 0.9f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("身份证"), std::string::npos) << r.reply;
  r = T("身份证号是一一零一零五一九八八零六零七一二三四",
        U("provide_info", 0.9f,
          {{"id_number", "一一零一零五一九八八零六零七一二三四", "11010519880607123X", false}}));
  // The normaliser rejected it: asked again, saying which part seems wrong, counted as re-asked.
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("最后一位"), std::string::npos) << r.reply;
  EXPECT_EQ(r.slots_reasked, 1);
  r = T("110105198806071234",
        U("provide_info", 0.9f, {{"id_number", "110105198806071234", "110105198806071234"}}));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("哪个区"), std::string::npos) << r.reply;
  EXPECT_EQ(r.slots_reasked, 0);
  r = T("朝阳区", U("provide_info", 0.9f, {{"district", "朝阳区"}}));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("朝阳区参保人（尾号1234）"), std::string::npos) << r.reply;
  EXPECT_EQ(r.reply.find("110105198806071234"), std::string::npos);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "answer");

  // All slots said up front: answered at once.
  r = T("帮我查下社保缴费 朝阳区 身份证110105198806071234",
        U("social_insurance_payment", 0.9f,
          {{"district", "朝阳区"}, {"id_number", "110105198806071234", "110105198806071234"}}),
        "c2");
  EXPECT_EQ(r.action, Action::kAnswer);
}

TEST_F(PolicyTest, DenyAsksWhatToCorrectAndTakesTheCorrection) {
  T("小区电梯坏了", U("elevator_fault", 0.9f, {{"address", "幸福小区5号楼"}}));
  TurnReply r = T("不对", U("deny", 0.95f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("更正"), std::string::npos);
  r = T("是幸福小区6号楼", U("provide_info", 0.9f, {{"address", "幸福小区6号楼"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_NE(r.reply.find("幸福小区6号楼电梯故障"), std::string::npos) << r.reply;
  EXPECT_NE(r.reply.find("住房和城乡建设局"), std::string::npos) << r.reply;
  r = T("对", U("affirm", 0.95f));
  ASSERT_EQ(r.action, Action::kDispatch);
  EXPECT_EQ(dm_->GetWorkOrder(r.work_order_id)->slots.at(0).value, "幸福小区6号楼");
}

TEST_F(PolicyTest, CorrectionInTheDenyTurnItselfIsReadBackAgain) {
  T("我们这里停电了",
    U("power_outage", 0.9f, {{"district", "海珠区"}, {"address", "江南大道100号"}}));
  TurnReply r = T("不是海珠区是荔湾区", U("deny", 0.9f, {{"district", "荔湾区"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.reply, "您反映的是荔湾区江南大道100号停电的问题，我们将转交供电公司处理，对吗？");
  EXPECT_EQ(Slot(r, "district"), "荔湾区");
}

TEST_F(PolicyTest, ConfidentNewBusinessIntentSwitchesTheMainIntent) {
  TurnReply r = T("我家没水了", U("water_outage", 0.9f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  // Not confident enough to switch: the main intent stays, the slot question is asked again.
  r = T("电也不稳", U("power_outage", 0.6f));
  EXPECT_EQ(r.intent, "water_outage");
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_EQ(r.slots_reasked, 1);
  // Confident: switched; the address question was asked before, so it counts as asked again.
  r = T("不对不对，是停电了不是停水", U("power_outage", 0.92f));
  EXPECT_EQ(r.intent, "power_outage");
  EXPECT_EQ(r.department, "power");
  EXPECT_EQ(r.action, Action::kAskSlot);
  r = T("白云区机场路3号",
        U("provide_info", 0.9f, {{"district", "白云区"}, {"address", "机场路3号"}}));
  EXPECT_EQ(r.reply, "您反映的是白云区机场路3号停电的问题，我们将转交供电公司处理，对吗？");
}

TEST_F(PolicyTest, AnswerIntentSwitchKeepsTheLatestQuestion) {
  TurnReply r = T("我想问一下公积金贷款怎么办", U("hpf_loan", 0.9f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("贷款"), std::string::npos);
  r = T("哦不是贷款，我是想用公积金付房租", U("hpf_withdrawal", 0.85f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_EQ(r.intent, "hpf_withdrawal");
  EXPECT_NE(r.reply.find("租房提取"), std::string::npos) << r.reply;  // text_any: 房租
  r = T("没有了谢谢", U("deny", 0.9f));
  EXPECT_EQ(r.action, Action::kEnd);
  EXPECT_TRUE(r.done);
  const CallSummary s = dm_->EndCall("c1");
  EXPECT_EQ(s.outcome, "answer");
  EXPECT_EQ(s.intent, "hpf_withdrawal");
  EXPECT_EQ(s.department, "hpf");
}

TEST_F(PolicyTest, SwitchWhileConfirmingReadsBackTheNewIntent) {
  T("楼上漏水漏到我家了", U("house_leak_repair", 0.9f, {{"address", "人民路5号2单元"}}));
  TurnReply r = T("不对，其实是小区物业不管事", U("property_service", 0.9f));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.intent, "property_service");
  EXPECT_NE(r.reply.find("人民路5号2单元物业服务"), std::string::npos) << r.reply;
}

TEST_F(PolicyTest, TwoUnclearTurnsInARowHandOff) {
  TurnReply r = T("那个啥来着", U("out_of_scope", 0.3f));
  EXPECT_EQ(r.action, Action::kClarify);
  EXPECT_FALSE(r.done);
  r = T("就是那个事儿", U("goodbye", 0.2f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_TRUE(r.done);
  // Later turns keep saying the caller is being transferred.
  r = T("喂", U("greeting", 0.9f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "human");
}

TEST_F(PolicyTest, SoundsAloneAreNoGreetingWhateverTheModelSays) {
  // A confident "greeting" for "呃呃呃" is the model's mistake: two such turns hand off.
  TurnReply r = T("嗯嗯啊啊", U("greeting", 0.96f));
  EXPECT_EQ(r.action, Action::kClarify);
  r = T("呃呃呃", U("greeting", 0.96f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "human");
}

TEST_F(PolicyTest, VagueOrganisationIsNoAnswerToWhichOne) {
  // "一家店" points at a shop without naming it: the organisation is still asked for.
  TurnReply r = T("我要投诉一家店卖假货",
                  U("consumer_complaint", 0.9f, {{"organization", "一家店"}}));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_EQ(Slot(r, "organization"), "<none>");
  r = T("就是那家好又多超市", U("provide_info", 0.8f, {{"organization", "好又多超市"}}));
  EXPECT_EQ(Slot(r, "organization"), "好又多超市");
}

TEST_F(PolicyTest, UnclearTurnsWhileASlotIsAskedFollowItsLadder) {
  T("我要反映个问题", U("water_outage", 0.9f));
  TurnReply r = T("呃那个就是", U("out_of_scope", 0.3f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("地址"), std::string::npos) << "re-asks the open question: " << r.reply;
  // The second turn without input ends the ladder: the caller cannot be heard, a person takes
  // over (on_no_input).
  r = T("嗯嗯那个", U("goodbye", 0.2f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "human");
}

TEST_F(PolicyTest, LowConfidenceStreakIsBrokenByAnUnderstoodTurn) {
  T("呃", U("out_of_scope", 0.2f));
  T("我家停水了", U("water_outage", 0.9f));
  TurnReply r = T("嗯", U("affirm", 0.3f));
  EXPECT_EQ(r.action, Action::kAskSlot);
  // A low-confidence turn that still carries a slot is understood.
  r = T("中山路1号", U("street_vendor", 0.4f, {{"address", "中山路1号"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.intent, "water_outage");
}

TEST_F(PolicyTest, BareValueAnswersAFreeTextQuestion) {
  T("公司拖欠我三个月工资", U("wage_arrears", 0.9f));
  TurnReply r = T("就是鑫源物业公司", U("provide_info", 0.7f));  // the model spanned nothing
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(Slot(r, "organization"), "鑫源物业公司");
  EXPECT_EQ(r.reply,
            "您反映的是鑫源物业公司拖欠工资的问题，我们将转交人力资源和社会保障局处理，对吗？");
}

TEST_F(PolicyTest, TurnLimitHandsOff) {
  config_.max_turns = 3;
  Make();
  T("喂", U("greeting", 0.9f));
  T("我要投诉", U("consumer_complaint", 0.9f));
  TurnReply r = T("这个嘛", U("provide_info", 0.9f));
  EXPECT_FALSE(r.done);
  r = T("还是那个", U("provide_info", 0.9f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "human");
}

TEST_F(PolicyTest, HumanAgentHandsOffAtOnce) {
  T("我家停水了", U("water_outage", 0.9f));
  TurnReply r = T("我要转人工", U("human_agent", 0.9f));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.intent, "water_outage");  // the agent sees what was collected
  const CallSummary s = dm_->EndCall("c1");
  EXPECT_EQ(s.outcome, "human");
  EXPECT_EQ(s.intent, "water_outage");
}

TEST_F(PolicyTest, OrderStatusAndUrgeLookTheOrderUp) {
  T("垃圾好几天没人收了", U("garbage_collection", 0.9f, {{"address", "解放路20号"}}), "a");
  const std::string id = T("对", U("affirm", 0.9f), "a").work_order_id;
  ASSERT_FALSE(id.empty());

  // Another call asks for the status, the id given as the normaliser writes it.
  TurnReply r = T("我想查一下工单进度", U("order_status", 0.9f), "b");
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("工单编号"), std::string::npos);
  const std::string spoken = "WO20261201000001";
  r = T("工单号是" + spoken, U("provide_info", 0.9f, {{"order_id", spoken, spoken}}), "b");
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find(id), std::string::npos) << r.reply;
  EXPECT_NE(r.reply.find("城市管理综合执法局"), std::string::npos) << r.reply;
  EXPECT_NE(r.reply.find("12月1日10:00"), std::string::npos) << r.reply;
  EXPECT_EQ(dm_->EndCall("b").outcome, "answer");

  // Urging, twice (second time in the same call, as a follow-up).
  r = T("我要催一下工单" + spoken, U("order_urge", 0.9f, {{"order_id", spoken, spoken}}), "c");
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("第1次"), std::string::npos) << r.reply;
  r = T("再催一下" + spoken, U("order_urge", 0.9f, {{"order_id", spoken, spoken}}), "c");
  EXPECT_NE(r.reply.find("第2次"), std::string::npos) << r.reply;
  auto order = dm_->GetWorkOrder(id);
  ASSERT_TRUE(order);
  EXPECT_EQ(order->urged_at.size(), 2u);
  EXPECT_EQ(order->urged_at[0], "2026-12-01T02:00:00Z");
}

TEST_F(PolicyTest, OrderStatusOfTheCallsOwnOrderNeedsNoId) {
  T("路口红绿灯坏了", U("traffic_signal", 0.9f, {{"address", "中山路和解放路路口"}}));
  const std::string id = T("对的", U("affirm", 0.9f)).work_order_id;
  TurnReply r = T("那大概什么时候能处理", U("order_status", 0.8f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find(id), std::string::npos) << r.reply;
  // Read as urging: the order was made in this call, so the caller hears its status instead.
  r = T("那我这个工单大概什么时候能处理好", U("order_urge", 0.66f));
  EXPECT_NE(r.reply.find("正在办理"), std::string::npos) << r.reply;
  EXPECT_TRUE(dm_->GetWorkOrder(id)->urged_at.empty());
  const CallSummary s = dm_->EndCall("c1");
  EXPECT_EQ(s.outcome, "dispatch");
  EXPECT_EQ(s.intent, "traffic_signal");  // summarised by the order, not the follow-up
  EXPECT_EQ(s.department, "traffic");
}

TEST_F(PolicyTest, UnknownOrderIsAskedAgainThenHandedOff) {
  TurnReply r = T("查工单GD20261128001",
                  U("order_status", 0.9f, {{"order_id", "GD20261128001", "GD20261128001"}}));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("没有查到"), std::string::npos) << r.reply;
  EXPECT_EQ(r.slots_reasked, 1);
  r = T("GD20261128002", U("provide_info", 0.9f, {{"order_id", "GD20261128002", "GD20261128002"}}));
  EXPECT_EQ(r.action, Action::kHandoff);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "human");
}

TEST_F(PolicyTest, SocialTurnsGetFittingReplies) {
  TurnReply r = T("你好", U("greeting", 0.9f));
  EXPECT_EQ(r.action, Action::kGreet);
  EXPECT_NE(r.reply.find("12345"), std::string::npos);
  r = T("今天天气怎么样", U("out_of_scope", 0.9f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("不归12345管"), std::string::npos);
  r = T("你们服务真好", U("praise", 0.9f));
  EXPECT_NE(r.reply.find("感谢"), std::string::npos);
  EXPECT_FALSE(r.done);
  r = T("好的再见", U("goodbye", 0.9f));
  EXPECT_EQ(r.action, Action::kEnd);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(dm_->EndCall("c1").outcome, "answer");  // thanked and told: a served call
  // Greeted and hung up: abandoned.
  T("喂你好", U("greeting", 0.9f), "c2");
  EXPECT_EQ(T("没事了再见", U("goodbye", 0.9f), "c2").action, Action::kEnd);
  EXPECT_EQ(dm_->EndCall("c2").outcome, "abandoned");
}

TEST_F(PolicyTest, BareValueShapedLikeThePendingSlotIsNotASwitch) {
  T("在饭店吃坏肚子了", U("food_safety", 0.95f));
  // The model reads the restaurant name alone as another business intent, confidently.
  TurnReply r = T("好味道餐厅", U("air_pollution", 0.93f));
  EXPECT_EQ(r.intent, "food_safety");
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(Slot(r, "organization"), "好味道餐厅");
  r = T("不对", U("deny", 0.95f));
  r = T("叫好味来餐厅", U("air_pollution", 0.96f));
  EXPECT_EQ(r.intent, "food_safety");
  EXPECT_EQ(Slot(r, "organization"), "好味来餐厅");
  // The same when the model spans the value but still gives the phrase another intent: a reply
  // that is little more than the value asked for is an answer.
  r = T("不对", U("deny", 0.95f));
  r = T("叫好味道餐厅", U("air_pollution", 0.98f, {{"organization", "好味道餐厅"}}));
  EXPECT_EQ(r.intent, "food_safety");
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(Slot(r, "organization"), "好味道餐厅");
  // ... and when it spans only the tail of the name, the whole reply is the name.
  r = T("不对", U("deny", 0.95f));
  r = T("叫好味道餐厅", U("air_pollution", 0.82f, {{"organization", "餐厅"}}));
  EXPECT_EQ(r.intent, "food_safety");
  EXPECT_EQ(Slot(r, "organization"), "好味道餐厅");
  // ... or only a middle part of it.
  r = T("不对", U("deny", 0.95f));
  r = T("叫好味道餐厅", U("air_pollution", 0.34f, {{"organization", "味道"}}));
  EXPECT_EQ(r.intent, "food_safety");
  EXPECT_EQ(Slot(r, "organization"), "好味道餐厅");
  // A span at the start of a longer phrase that merely ends like an organisation stays.
  r = T("不对", U("deny", 0.95f));
  r = T("好味道餐厅旁边那家店", U("air_pollution", 0.34f, {{"organization", "好味道餐厅"}}));
  EXPECT_EQ(Slot(r, "organization"), "好味道餐厅");
  // A part inside a phrase not shaped like an organisation stays as the model spanned it.
  r = T("不对", U("deny", 0.95f));
  r = T("叫好味道那个", U("air_pollution", 0.34f, {{"organization", "好味道"}}));
  EXPECT_EQ(Slot(r, "organization"), "好味道");
  // A phrase not shaped like an organisation does switch.
  r = T("不是，是河里有人排污水", U("water_pollution", 0.95f));
  EXPECT_EQ(r.intent, "water_pollution");
}

TEST_F(PolicyTest, ANewProblemThatNamesThePendingValueStillSwitches) {
  T("在饭店吃坏肚子了", U("food_safety", 0.95f));
  // More than the value is said: a new problem about the same restaurant.
  TurnReply r = T("好味道餐厅的油烟太大了熏得我们没法开窗",
                  U("cooking_fume", 0.95f, {{"organization", "好味道餐厅"}}));
  EXPECT_EQ(r.intent, "cooking_fume");
}

TEST_F(PolicyTest, LastValueOfATypeWinsAndAddressPiecesJoin) {
  nlu::Understanding u = U("deny", 0.95f, {{"district", "天河区"}, {"district", "海珠区"}});
  T("我们这停电了", U("power_outage", 0.9f));
  nlu::Understanding a =
      U("provide_info", 0.9f, {{"address", "荷光路"}, {"address", "南一巷12号"}});
  a.slots[0].start = 0;
  a.slots[0].end = 3;
  a.slots[1].start = 3;
  a.slots[1].end = 9;
  TurnReply r = T("荷光路南一巷12号", a);
  EXPECT_EQ(Slot(r, "address"), "荷光路南一巷12号");
  r = T("不是天河区，是海珠区", u);
  EXPECT_EQ(Slot(r, "district"), "海珠区");
}

TEST_F(PolicyTest, OrderIdWithDashIsReadFromTheText) {
  T("垃圾没人收", U("garbage_collection", 0.9f, {{"address", "解放路20号"}}), "a");
  const std::string id = T("对", U("affirm", 0.9f), "a").work_order_id;
  ASSERT_EQ(id, "WO20261201-000001");
  // The model breaks the id at the dash into an order id and a "phone".
  TurnReply r = T("查一下工单WO20261201-000001的进度",
                  U("order_status", 0.9f,
                    {{"order_id", "20261201", "20261201"}, {"phone", "000001", "000001"}}),
                  "b");
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find(id), std::string::npos) << r.reply;
  EXPECT_EQ(Slot(r, "phone"), "<none>");
  // Digits alone find it too.
  r = T("工单号是20261201000001",
        U("order_urge", 0.9f, {{"order_id", "20261201000001", "20261201000001"}}), "c");
  EXPECT_NE(r.reply.find("第1次"), std::string::npos) << r.reply;
}

TEST_F(PolicyTest, UnfinishedCallIsAbandoned) {
  T("我要投诉一个饭店", U("food_safety", 0.9f));
  const CallSummary s = dm_->EndCall("c1");
  EXPECT_EQ(s.outcome, "abandoned");
  EXPECT_EQ(s.intent, "food_safety");
  EXPECT_EQ(s.department, "market");
  EXPECT_EQ(s.work_order_id, "");
}

TEST_F(PolicyTest, BadCallIdsAreInvalidArgumentsUnknownIsNotFound) {
  for (const std::string& bad : {std::string(""), std::string(129, 'a'), std::string("a b"),
                                 std::string("呼叫1"), std::string("x/y")}) {
    try {
      T("你好", U("greeting", 0.9f), bad);
      ADD_FAILURE() << "accepted call id '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
    }
  }
  EXPECT_NO_THROW(T("你好", U("greeting", 0.9f), std::string(128, 'a')));
  for (const std::string& bad_text : {std::string("\xff\xfe"), std::string(5000, 'a')}) {
    try {
      T(bad_text, U("greeting", 0.9f));
      ADD_FAILURE() << "accepted text of " << bad_text.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.what();
    }
  }
  EXPECT_NO_THROW(T("你好", U("greeting", 0.9f), "sip:call-1_2.3"));
  try {
    dm_->EndCall("never-seen");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
  }
}

TEST_F(PolicyTest, TurnsOfOneCallAreSerialised) {
  constexpr int kThreads = 4, kTurns = 25;
  config_.max_turns = 1000;
  Make();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kTurns; ++i) T("嗯", U("provide_info", 0.9f));
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(dm_->EndCall("c1").turns, kThreads * kTurns);
}

TEST_F(PolicyTest, IdleSessionsExpire) {
  auto now =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto store = NewMemorySessionStore(std::chrono::seconds(600), [now] { return *now; });
  auto dm = NewDialogManager(config_, testing::TheTaxonomy(), std::move(store),
                             WorkOrderStore::Open(config_.work_order_db));
  dm->Turn("idle", "我家停水了", U("water_outage", 0.9f), Dec1());
  *now += std::chrono::seconds(599);
  EXPECT_EQ(
      dm->Turn("idle", "中山路1号", U("provide_info", 0.9f, {{"address", "中山路1号"}}), Dec1())
          .action,
      Action::kConfirm);
  *now += std::chrono::seconds(601);
  // Idle too long: the call starts over.
  TurnReply r = dm->Turn("idle", "对", U("affirm", 0.9f), Dec1());
  EXPECT_EQ(r.intent, "");
  EXPECT_EQ(dm->EndCall("idle").turns, 1);
}

TEST_F(PolicyTest, MemoryStoreRefusesCallsBeyondItsCapUntilOneIdlesOut) {
  auto now =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto store = NewMemorySessionStore(std::chrono::seconds(600), [now] { return *now; }, 2);
  auto dm = NewDialogManager(config_, testing::TheTaxonomy(), std::move(store),
                             WorkOrderStore::Open(config_.work_order_db));
  dm->Turn("a", "我家停水了", U("water_outage", 0.9f), Dec1());
  *now += std::chrono::seconds(300);
  dm->Turn("b", "我家停电了", U("power_outage", 0.9f), Dec1());
  // A third live call is refused with a clear error; the two held calls go on.
  try {
    dm->Turn("c", "路灯坏了", U("street_light", 0.9f), Dec1());
    ADD_FAILURE() << "a third call was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("max_sessions"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dm->Turn("b", "中山路1号", U("provide_info", 0.9f, {{"address", "中山路1号"}}), Dec1())
                .action,
            Action::kConfirm);
  // Call a idles out (600 s since its last turn): its place goes to the new call.
  *now += std::chrono::seconds(301);
  EXPECT_EQ(dm->Turn("c", "路灯坏了", U("street_light", 0.9f), Dec1()).intent, "street_light");
}

TEST(DialogConfigTest, LoadsTheShippedConfigAndRejectsBadFields) {
  const DialogConfig c = DialogConfig::Load(testing::SourcePath("config/dialog.yaml"));
  EXPECT_EQ(c.session_store, "memory");
  EXPECT_EQ(c.max_turns, 20);
  EXPECT_FLOAT_EQ(c.switch_confidence, 0.8f);
  const std::string dir = testing::TempDir("badconfig");
  auto load_with = [&](const std::string& text) {
    std::ofstream(dir + "/d.yaml") << text;
    return DialogConfig::Load(dir + "/d.yaml");
  };
  for (const char* bad_text : {"max_turns: 0", "min_confidence: 1.5", "session_store: mongo://x",
                               "idle_timeout_s: abc", "switch_confidence: 0.1",
                               "unclear_handoff_after: 0", "duplicate_window_h: -1",
                               "max_sessions: 0"}) {
    const std::string bad(bad_text);
    try {
      load_with(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.substr(0, bad.find(':'))), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(DialogConfig::Load(dir + "/missing.yaml"), Error);
  // `min_confidence: model` takes the model folder's calibrated threshold; a number stays.
  EXPECT_TRUE(c.min_confidence_from_model);
  {
    DialogConfig m = load_with("min_confidence: model\nswitch_confidence: 0.6\n");
    EXPECT_TRUE(m.min_confidence_from_model);
    EXPECT_NE(m.ApplyModelThreshold(0.65f).find("calibrated"), std::string::npos);
    EXPECT_FLOAT_EQ(m.min_confidence, 0.65f);
    EXPECT_FLOAT_EQ(m.switch_confidence, 0.65f);  // never below min_confidence
    DialogConfig none = load_with("min_confidence: model\n");
    EXPECT_NE(none.ApplyModelThreshold(std::nullopt).find("WARNING"), std::string::npos);
    EXPECT_FLOAT_EQ(none.min_confidence, 0.5f);
    DialogConfig fixed = load_with("min_confidence: 0.3\n");
    fixed.ApplyModelThreshold(0.65f);
    EXPECT_FLOAT_EQ(fixed.min_confidence, 0.3f);
  }
  // The rules' sections are checked where they are read (DialogTexts::Load), naming the field.
  const std::string shipped = [&] {
    std::ifstream in(testing::SourcePath("config/dialog.yaml"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  for (const auto& [from, to, field] : std::vector<std::array<std::string, 3>>{
           {"  on_exhausted: handoff\n", "  on_exhausted: maybe\n", "on_exhausted"},
           {"  max_no_match: 3\n", "  max_no_match: 0\n", "max_no_match"},
           {"      number: \"119\"\n", "", "emergencies.rules"},
           {"  check_digit:", "  check_digits:", "id_number_problems.check_digit"},
           {"    department: city_mgmt\n    issue: 路灯损坏不亮", "    department: nowhere\n    issue: x",
            "reroutes"}}) {
    std::string text = shipped;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(dir + "/rules.yaml") << text;
    try {
      DialogTexts::Load(dir + "/rules.yaml", testing::TheTaxonomy());
      // street_light may be in the taxonomy: then its reroute needs no department of its own.
      if (field != "reroutes" || !testing::TheTaxonomy().FindIntent("street_light"))
        ADD_FAILURE() << "accepted " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  // A manager refuses an answers dir without a file for every answer intent.
  DialogConfig d = testing::TestConfig("noanswers");
  d.answers_dir = dir;
  try {
    DialogManager::Create(d, testing::TheTaxonomy());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pension_inquiry.yaml"), std::string::npos) << e.what();
  }
}

TEST(SessionJsonTest, RoundTripsEveryField) {
  Session s;
  s.call_id = "c-9";
  s.main_intent = "wage_arrears";
  s.stage = Stage::kCorrecting;
  s.SetSlot({"organization", "鑫源公司", ""}, true);
  s.SetSlot({"phone", "13812345678", "13812345678"}, false);
  s.asking_slot = "organization";
  s.asked_slots = {"organization"};
  s.turns = 7;
  s.low_confidence_streak = 1;
  s.order_misses = 1;
  s.caller_texts = {"a", "b"};
  s.all_texts = {"x", "a", "b"};
  s.work_order_id = "WO20261201-000001";
  s.dispatched = true;
  s.handed_off = true;
  CallIssue issue;
  issue.intent = "water_outage";
  issue.kind = "dispatch";
  issue.department = "water";
  issue.outcome = "merged";
  issue.work_order_id = "WO20261201-000002";
  issue.slots = {{"address", "天府路1号", ""}};
  s.issues = {issue};
  issue.outcome = "pending";
  s.queued = {issue};
  s.active_open = true;
  s.unverified = {"organization"};
  s.asks = {{"organization", 2}};
  s.no_match = {{"organization", 1}};
  s.no_input = {{"address", 1}};
  s.confirm_misses = 1;
  s.finished_turn = 3;
  s.transferred = true;
  const nlohmann::json j = SessionToJson(s);
  const Session t = SessionFromJson(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(SessionToJson(t), j);
  EXPECT_EQ(t.stage, Stage::kCorrecting);
  EXPECT_EQ(t.slot_valid, (std::vector<bool>{true, false}));
  nlohmann::json broken = j;
  broken.erase("stage");
  EXPECT_THROW(SessionFromJson(broken), Error);
  broken = j;
  broken["version"] = 2;
  EXPECT_THROW(SessionFromJson(broken), Error);
}

}  // namespace
}  // namespace hotline::dialog

namespace hotline::dialog {
namespace {

using testing::Dec1;
using testing::S;
using testing::U;

TEST(ActsTest, ReadsSeveralActsAndCorrectionsByRule) {
  TurnActs a = ReadActs("对的，谢谢，再见");
  EXPECT_TRUE(a.affirm && a.thanks && a.goodbye);
  EXPECT_FALSE(a.deny);
  EXPECT_EQ(a.content, "");
  a = ReadActs("好 麻烦你们快点处理 再见");
  EXPECT_TRUE(a.affirm && a.urge && a.goodbye);
  // Single characters count only standing alone: "好味道" and "对面" are words.
  a = ReadActs("好味道餐厅");
  EXPECT_FALSE(a.affirm);
  EXPECT_EQ(a.content, "好味道餐厅");
  EXPECT_FALSE(ReadActs("对面的小区").affirm);
  a = ReadActs("不是电子二路，是电子三路");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_TRUE(a.deny);
  EXPECT_EQ(a.corrections[0].old_value, "电子二路");
  EXPECT_EQ(a.corrections[0].new_value, "电子三路");
  a = ReadActs("不对 我说错了 是建国路99号");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].old_value, "");
  EXPECT_EQ(a.corrections[0].new_value, "建国路99号");
  a = ReadActs("电子二路说错了，是电子三路");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].old_value, "电子二路");
  a = ReadActs("最后一位是五");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].part, "last");
  EXPECT_EQ(a.corrections[0].new_value, "5");
  a = ReadActs("改成鑫源物业公司，对吧");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].new_value, "鑫源物业公司");
  EXPECT_FALSE(a.deny);
  a = ReadActs("是赤岗北路70号，不是赤岗路");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].old_value, "赤岗路");
  EXPECT_EQ(a.corrections[0].new_value, "赤岗北路70号");
  a = ReadActs("我叫张伟，不叫张卫");
  ASSERT_EQ(a.corrections.size(), 1u);
  EXPECT_EQ(a.corrections[0].old_value, "张卫");
  EXPECT_EQ(a.corrections[0].new_value, "张伟");
  EXPECT_TRUE(ReadActs("算了没事了").cancel);
  EXPECT_TRUE(ReadActs("嗯嗯啊啊").noise);
  EXPECT_TRUE(ReadActs("。。。").noise);
  EXPECT_FALSE(ReadActs("明天会下雨吗").noise);
  EXPECT_TRUE(ReadActs("我不知道").dont_know);
  EXPECT_TRUE(ReadActs("还有一个事，电梯也坏了").more);
  EXPECT_EQ(DigitRuns("身份证幺幺零幺零五一九四九一二三一零零二叉"),
            (std::vector<std::string>{"11010519491231002X"}));
  // The check character ends the ID: a phone said after it with a space is a run of its own
  // (found by fuzz/slots_fuzz.cc; before, one 29-character run hid both).
  EXPECT_EQ(DigitRuns("11010519491231002叉 13812345678"),
            (std::vector<std::string>{"11010519491231002X", "13812345678"}));
  EXPECT_EQ(DigitRuns("11010519491231002x-0"),
            (std::vector<std::string>{"11010519491231002X", "0"}));
}

class RulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::TestConfig(::testing::UnitTest::GetInstance()->current_test_info()->name());
    dm_ = DialogManager::Create(config_, testing::TheTaxonomy());
  }
  TurnReply T(const std::string& text, const nlu::Understanding& u,
              const std::string& call = "c1") {
    return dm_->Turn(call, text, u, Dec1());
  }
  static std::string Slot(const TurnReply& r, const std::string& type) {
    for (const auto& s : r.slots)
      if (s.type == type) return s.value;
    return "<none>";
  }
  static bool Has(const TurnReply& r, const std::string& act) {
    return std::find(r.acts.begin(), r.acts.end(), act) != r.acts.end();
  }
  DialogConfig config_;
  std::unique_ptr<DialogManager> dm_;
};

TEST_F(RulesTest, CorrectionGoesToTheNamedPartAndIsReadBack) {
  T("雁塔区电子二路100号停水了",
    U("water_outage", 0.9f, {{"district", "雁塔区"}, {"address", "电子二路100号"}}));
  // The model reads the correction as a new address of its own; the rule keeps the number.
  TurnReply r = T("不是电子二路，是电子三路", U("deny", 0.8f, {{"address", "电子三路"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(Slot(r, "address"), "电子三路100号");
  EXPECT_EQ(Slot(r, "district"), "雁塔区");
  EXPECT_NE(r.reply.find("雁塔区电子三路100号"), std::string::npos) << r.reply;
  EXPECT_TRUE(Has(r, "deny") && Has(r, "correction"));
  EXPECT_EQ(r.corrected, std::vector<std::string>{"address"});
  r = T("不对 我说错了 是电子三路99号", U("deny", 0.7f));  // the model spans nothing
  EXPECT_EQ(Slot(r, "address"), "电子三路99号");
  r = T("对的，谢谢，再见", U("goodbye", 0.9f));  // the model's intent is goodbye
  EXPECT_EQ(r.action, Action::kDispatch);
  EXPECT_FALSE(r.work_order_id.empty());
  EXPECT_TRUE(r.done);
  const CallSummary c = dm_->EndCall("c1");
  EXPECT_EQ(c.outcome, "dispatch");
  auto order = dm_->GetWorkOrder(c.work_order_id);
  ASSERT_TRUE(order);
  EXPECT_NE(order->summary.find("市民来电反映：雁塔区电子三路99号停水问题。"), std::string::npos)
      << order->summary;
  EXPECT_NE(order->summary.find("请自来水公司核实处理。"), std::string::npos) << order->summary;
}

TEST_F(RulesTest, CorrectionsOfOtherSlotsAreNormalised) {
  T("电梯坏了，我电话13912345678", U("elevator_fault", 0.9f, {{"phone", "13912345678", "13912345678"}}));
  TurnReply r = T("电话说错了，是13912345679", U("deny", 0.8f));
  EXPECT_EQ(Slot(r, "phone"), "13912345679");
  EXPECT_EQ(r.corrected, std::vector<std::string>{"phone"});
  r = T("时间改成昨天晚上十点", U("provide_info", 0.8f));
  EXPECT_EQ(Slot(r, "time"), "昨天晚上十点");
  for (const auto& f : r.slots)
    if (f.type == "time") EXPECT_EQ(f.normalized, "2026-11-30T22:00:00+08:00");
}

TEST_F(RulesTest, ImplicitAgreementFilesTheOrderNeverAbandoned) {
  for (const char* yes : {"好", "行", "就这样", "麻烦快点处理", "好，谢谢。", "谢谢，再见"}) {
    const std::string call = std::string("c-") + std::to_string(std::hash<std::string>()(yes));
    T("天河区天河路1号停电了",
      U("power_outage", 0.9f, {{"district", "天河区"}, {"address", "天河路1号"}}), call);
    // The model's reading of the short reply does not matter: out of scope at low confidence.
    TurnReply r = T(yes, U("out_of_scope", 0.2f), call);
    EXPECT_EQ(r.action, Action::kDispatch) << yes;
    EXPECT_EQ(dm_->EndCall(call).outcome, "dispatch") << yes;
  }
}

TEST_F(RulesTest, LadderRephrasesThenOffersTheAlternativeThenGoesOnUnverified) {
  T("公司拖欠我工资", U("wage_arrears", 0.9f));
  TurnReply r = T("那个那个", U("out_of_scope", 0.3f));  // noise: no-input 1
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("麻烦您再说一下"), std::string::npos) << r.reply;  // rephrase
  r = T("我不知道", U("deny", 0.6f));
  EXPECT_EQ(r.reply, "不知道单位名称的话，说一下地址也可以。");
  EXPECT_TRUE(Has(r, "dont_know"));
  r = T("真的不清楚", U("deny", 0.6f));  // after the alternative: go on, unverified
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_NE(r.reply.find("待核实"), std::string::npos) << r.reply;
  r = T("对", U("affirm", 0.9f));
  auto order = dm_->GetWorkOrder(r.work_order_id);
  ASSERT_TRUE(order);
  EXPECT_EQ(order->unverified, std::vector<std::string>{"organization"});
  EXPECT_NE(order->summary.find("单位名称来电人未能提供，需核实。"), std::string::npos)
      << order->summary;
}

TEST_F(RulesTest, AlternativeSlotStandsInForTheAskedOne) {
  T("公司拖欠我工资", U("wage_arrears", 0.9f));
  TurnReply r = T("在海珠区新港西路1号",
                  U("provide_info", 0.9f, {{"district", "海珠区"}, {"address", "新港西路1号"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_NE(r.reply.find("海珠区新港西路1号"), std::string::npos) << r.reply;
}

TEST_F(RulesTest, IdNumberSaysWhatIsWrongAndTakesAValidOneLater) {
  T("帮我查一下社保缴费记录", U("social_insurance_payment", 0.9f));
  TurnReply r = T("440106198503121235", U("provide_info", 0.9f,
                                        {{"id_number", "440106198503121235",
                                          "440106198503121235", false}}));
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_NE(r.reply.find("最后一位"), std::string::npos) << r.reply;
  r = T("最后一位是七", U("provide_info", 0.5f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("1237"), std::string::npos) << r.reply;  // tail4 of the fixed number
  // Too short: the length is named.
  T("查社保缴费记录", U("social_insurance_payment", 0.9f), "c2");
  r = T("4401061985", U("provide_info", 0.9f), "c2");
  EXPECT_NE(r.reply.find("18位"), std::string::npos) << r.reply;
}

TEST_F(RulesTest, PolicyQuestionIsAnsweredWithoutTheIdNumber) {
  TurnReply r = T("社保断缴了怎么补缴", U("social_insurance_payment", 0.9f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("补缴"), std::string::npos);
  EXPECT_EQ(r.reply.find("尾号"), std::string::npos) << "no ID number was asked: " << r.reply;
}

TEST_F(RulesTest, EmergencyIsTransferredAtOnceCountedAndConfigurable) {
  T("我家停水了", U("water_outage", 0.9f));
  TurnReply r = T("哎呀厨房着火了", U("water_outage", 0.6f));
  EXPECT_EQ(r.action, Action::kTransfer);
  EXPECT_EQ(r.transfer_to, "119");
  EXPECT_EQ(r.transfer_category, "fire");
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(Has(r, "emergency"));
  EXPECT_NE(r.reply.find("119"), std::string::npos);
  const CallSummary c = dm_->EndCall("c1");
  EXPECT_EQ(c.outcome, "transfer");
  // The fire service's department when the taxonomy has one, else the hotline's.
  EXPECT_EQ(c.department, testing::TheTaxonomy().departments.count("fire") ? "fire" : "hotline");
  ASSERT_EQ(c.issues.size(), 2u);
  EXPECT_EQ(c.issues[0].outcome, "pending");
  EXPECT_EQ(c.issues[1].transfer_to, "119");
  // An emergency intent (of the newer taxonomy), with no keyword in the words.
  r = T("救命", U("emergency_traffic_injury", 0.9f), "c2");
  if (testing::TheTaxonomy().FindIntent("emergency_traffic_injury")) {
    EXPECT_EQ(r.transfer_to, "122");
  } else {
    EXPECT_EQ(r.action, Action::kClarify) << "unknown to this taxonomy: not trusted";
  }
  r = T("有人持刀抢劫", U("out_of_scope", 0.9f), "c3");
  EXPECT_EQ(r.transfer_to, "110");
  // Past, or a claim about it: no emergency now.
  r = T("上个月出了车祸，保险理赔一直没下来", U("out_of_scope", 0.9f), "c4");
  EXPECT_NE(r.action, Action::kTransfer);
  // Look-alike words are no fire.
  r = T("燃气灶打不着火", U("gas_service", 0.9f), "c5");
  EXPECT_EQ(r.action, Action::kAskSlot);
}

TEST_F(RulesTest, LegalOutOfScopeNoiseAndCancel) {
  TurnReply r = T("法院判决了他不执行怎么办", U("consumer_complaint", 0.7f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_TRUE(Has(r, "legal"));
  EXPECT_NE(r.reply.find("法院"), std::string::npos);
  r = T("明天会下雨吗", U("out_of_scope", 0.9f), "c2");
  EXPECT_NE(r.reply.find("这个不归12345管"), std::string::npos) << r.reply;
  EXPECT_EQ(r.reply.find("已记下"), std::string::npos);
  r = T("明天会下雨吗", U("out_of_scope", 0.2f, {{"time", "明天"}}), "c3");
  EXPECT_NE(r.reply.find("这个不归12345管"), std::string::npos) << "even unsure: " << r.reply;
  r = T("嗯嗯啊啊", U("greeting", 0.4f), "c4");
  EXPECT_EQ(r.action, Action::kClarify);
  EXPECT_NE(r.reply.find("杂音"), std::string::npos);
  r = T("呃呃", U("out_of_scope", 0.3f), "c4");
  EXPECT_EQ(r.action, Action::kHandoff);
  r = T("算了没事了", U("greeting", 0.6f), "c5");
  EXPECT_EQ(r.action, Action::kEnd);
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(Has(r, "cancel"));
  EXPECT_EQ(r.reply.find("您好"), std::string::npos) << "no fresh greeting: " << r.reply;
}

TEST_F(RulesTest, TwoProblemsInOneTurnGetTwoOrdersAndTheReadBackCountsThem) {
  TurnReply r = T("停水了，电梯也坏了", U("water_outage", 0.9f));
  EXPECT_TRUE(Has(r, "new_problem"));
  EXPECT_EQ(r.action, Action::kAskSlot);
  r = T("天河区天府路1号", U("provide_info", 0.9f, {{"district", "天河区"}, {"address", "天府路1号"}}));
  EXPECT_NE(r.reply.find("一共反映了2个问题，这是第1个"), std::string::npos) << r.reply;
  r = T("对", U("affirm", 0.9f));
  EXPECT_EQ(r.action, Action::kDispatch);
  EXPECT_FALSE(r.done);
  const std::string first = r.work_order_id;
  EXPECT_NE(r.reply.find("电梯"), std::string::npos) << "the next problem is read back: " << r.reply;
  r = T("对", U("affirm", 0.9f));
  EXPECT_EQ(r.action, Action::kDispatch);
  EXPECT_TRUE(r.done);
  EXPECT_NE(r.work_order_id, first);
  const CallSummary c = dm_->EndCall("c1");
  EXPECT_EQ(c.intent, "water_outage");
  EXPECT_EQ(c.department, "water");
  ASSERT_EQ(c.issues.size(), 2u);
  EXPECT_EQ(c.issues[1].intent, "elevator_fault");
  EXPECT_EQ(c.issues[1].department, "housing");
}

TEST_F(RulesTest, RepeatReportJoinsTheOpenOrder) {
  T("天河区天府路9号停水了", U("water_outage", 0.9f, {{"district", "天河区"}, {"address", "天府路9号"}}), "a");
  const std::string id = T("对", U("affirm", 0.9f), "a").work_order_id;
  T("天府路9号停水", U("water_outage", 0.9f, {{"address", "天府路9号"}}), "b");
  TurnReply r = T("对", U("affirm", 0.9f), "b");
  EXPECT_EQ(r.action, Action::kDispatch);
  EXPECT_TRUE(r.merged);
  EXPECT_EQ(r.work_order_id, id);
  EXPECT_NE(r.reply.find("并单"), std::string::npos) << r.reply;
  auto order = dm_->GetWorkOrder(id);
  ASSERT_TRUE(order);
  EXPECT_EQ(order->linked_calls, std::vector<std::string>{"b"});
  EXPECT_EQ(order->urged_at.size(), 1u);
  EXPECT_EQ(dm_->EndCall("b").outcome, "dispatch");
  // Outside the window: a new order.
  T("天府路9号停水", U("water_outage", 0.9f, {{"address", "天府路9号"}}), "c");
  r = dm_->Turn("c", "对", U("affirm", 0.9f), Dec1() + std::chrono::hours(config_.duplicate_window_h + 1));
  EXPECT_FALSE(r.merged);
  EXPECT_NE(r.work_order_id, id);
}

TEST_F(RulesTest, AnAnswerIntentWithoutItsFileGetsTheDefaultAnswer) {
  const std::string dir = testing::TempDir("answers-default");
  for (const auto& e : std::filesystem::directory_iterator(config_.answers_dir))
    if (e.path().filename() != "vaccination.yaml")
      std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string());
  config_.answers_dir = dir;
  dm_ = DialogManager::Create(config_, testing::TheTaxonomy());
  TurnReply r = T("小孩打疫苗要预约吗", U("vaccination", 0.9f));
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(r.reply.find("疫苗接种"), std::string::npos) << r.reply;  // {issue}: the taxonomy's zh
  EXPECT_NE(r.reply.find("卫生健康委员会"), std::string::npos) << r.reply;
  // Without _default.yaml the missing file is an error naming it.
  std::filesystem::remove(dir + "/_default.yaml");
  try {
    DialogManager::Create(config_, testing::TheTaxonomy());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vaccination.yaml"), std::string::npos) << e.what();
  }
}

TEST_F(RulesTest, AnAnswerThatMentionsAProblemWordRaisesNoProblem) {
  T("我家停水了", U("water_outage", 0.9f));
  TurnReply r = T("就在垃圾站旁边的幸福小区", U("provide_info", 0.8f, {{"address", "幸福小区"}}));
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.intent, "water_outage");
  EXPECT_EQ(r.reply.find("一共反映了"), std::string::npos) << r.reply;
  // Said with "还有", the same words do raise a second problem.
  T("我家停水了", U("water_outage", 0.9f), "c2");
  r = T("幸福小区，还有垃圾站的垃圾好几天没人收", U("provide_info", 0.8f, {{"address", "幸福小区"}}),
        "c2");
  EXPECT_NE(r.reply.find("一共反映了2个问题"), std::string::npos) << r.reply;
}

TEST_F(RulesTest, StreetLightsAreCityManagement) {
  TurnReply r = T("路灯坏了", U("traffic_signal", 0.9f));
  EXPECT_EQ(r.department, "city_mgmt");
}

TEST_F(RulesTest, WorkOrderTextIsMaskedForLogs) {
  T("电梯坏了我电话13912345678", U("elevator_fault", 0.9f, {{"phone", "13912345678", "13912345678"}}));
  T("越秀区东湖路1号", U("provide_info", 0.9f, {{"district", "越秀区"}, {"address", "东湖路1号"}}));
  TurnReply r = T("对", U("affirm", 0.9f));
  EXPECT_EQ(r.work_order_summary.find("13912345678"), std::string::npos) << r.work_order_summary;
  auto order = dm_->GetWorkOrder(r.work_order_id);
  ASSERT_TRUE(order);
  EXPECT_NE(order->summary.find("联系电话：13912345678"), std::string::npos) << order->summary;
}

}  // namespace
}  // namespace hotline::dialog

namespace hotline::dialog {
namespace {

using testing::Dec1;
using testing::U;

// The intents a newer taxonomy adds (emergency_*, gas_leak, petition, court_matters, street_light,
// express_delivery, ...), on top of whichever taxonomy the tree holds: the dialog must take them
// without a code change.
nlu::Taxonomy NewerTaxonomy() {
  nlu::Taxonomy t = testing::TheTaxonomy();
  for (const auto& [id, name] : std::vector<std::pair<std::string, std::string>>{
           {"police", "公安局（110指挥中心）"}, {"fire", "消防救援支队（119）"},
           {"ambulance", "急救中心（120）"},    {"petition", "信访局"},
           {"court", "人民法院"},               {"justice", "司法局"},
           {"postal", "邮政管理局"}})
    t.departments.emplace(id, name);
  auto add = [&](const std::string& id, const std::string& dept, const std::string& kind,
                 const std::string& zh, std::vector<std::string> required) {
    if (t.FindIntent(id)) return;
    nlu::IntentInfo i;  // by field: the struct grows (category, co_depts)
    i.id = id;
    i.line = "city";
    i.dept = dept;
    i.kind = kind;
    i.zh = zh;
    i.required_slots = std::move(required);
    t.intents.push_back(std::move(i));
  };
  t.business_lines.emplace("city", "城市管理");
  add("emergency_crime", "police", "dispatch", "正在发生的违法犯罪（转110）", {"address"});
  add("gas_leak", "gas_heat", "dispatch", "燃气泄漏（转燃气抢修）", {"address"});
  add("petition", "petition", "dispatch", "信访事项与信访件办理", {});
  add("court_matters", "court", "dispatch", "法院立案审理与判决执行", {});
  add("legal_aid", "justice", "answer", "法律援助与公证咨询", {});
  add("street_light", "city_mgmt", "dispatch", "路灯不亮与损坏", {"address"});
  add("manhole_cover", "city_mgmt", "dispatch", "井盖缺失破损", {"address"});
  add("express_delivery", "postal", "dispatch", "快递丢件延误与投诉", {"organization"});
  add("funeral_service", "civil", "answer", "殡葬服务与公墓", {});
  return t;
}

TEST(NewerTaxonomyTest, NewIntentsAreHandledWithoutACodeChange) {
  const nlu::Taxonomy taxonomy = NewerTaxonomy();
  const DialogConfig config = testing::TestConfig("newer");
  auto dm = DialogManager::Create(config, taxonomy);
  auto u = [&](const std::string& intent, float p) {
    nlu::Understanding x = U("greeting", p);
    x.intent = intent;
    x.top_k = {{intent, p}};
    return x;
  };
  TurnReply r = dm->Turn("a", "家里有股怪味道", u("gas_leak", 0.9f), Dec1());
  EXPECT_EQ(r.action, Action::kTransfer);
  EXPECT_EQ(r.transfer_to, "119");
  EXPECT_EQ(dm->EndCall("a").department, "gas_heat");
  r = dm->Turn("b", "快来人啊", u("emergency_crime", 0.9f), Dec1());
  EXPECT_EQ(r.transfer_to, "110");
  EXPECT_EQ(dm->EndCall("b").department, "police");
  r = dm->Turn("c", "我的事一直没人管，我要往上反映", u("petition", 0.9f), Dec1());
  EXPECT_EQ(r.action, Action::kAnswer);
  EXPECT_NE(std::find(r.acts.begin(), r.acts.end(), "legal"), r.acts.end());
  EXPECT_EQ(dm->EndCall("c").department, "petition");
  r = dm->Turn("d", "那个案子的事", u("court_matters", 0.9f), Dec1());
  EXPECT_EQ(dm->EndCall("d").department, "court");
  // By keyword, the department of the channel when the taxonomy has it.
  dm->Turn("e", "我想去信访", u("out_of_scope", 0.9f), Dec1());
  EXPECT_EQ(dm->EndCall("e").department, "petition");
  // Legal aid is an answer intent with its own file, not the legal-channel rule.
  r = dm->Turn("f", "法律援助怎么申请", u("legal_aid", 0.9f), Dec1());
  EXPECT_NE(r.reply.find("12348"), std::string::npos) << r.reply;
  EXPECT_EQ(dm->EndCall("f").intent, "legal_aid");
  r = dm->Turn("g", "路灯坏了", u("street_light", 0.9f), Dec1());
  EXPECT_EQ(r.intent, "street_light");
  EXPECT_EQ(r.department, "city_mgmt");
  // An intent with no `issues` text is read back by the taxonomy's zh.
  dm->Turn("h", "井盖没了", u("manhole_cover", 0.9f), Dec1());
  r = dm->Turn("h", "天河区天河路2号",
               U("provide_info", 0.9f, {{"district", "天河区"}, {"address", "天河路2号"}}), Dec1());
  EXPECT_NE(r.reply.find("井盖缺失破损"), std::string::npos) << r.reply;
  // Express delivery is in scope once the taxonomy takes it.
  r = dm->Turn("i", "我的快递丢了", u("express_delivery", 0.9f), Dec1());
  EXPECT_EQ(r.action, Action::kAskSlot);
  EXPECT_EQ(r.department, "postal");
}

}  // namespace
}  // namespace hotline::dialog
