#!/usr/bin/env python3
"""Writes the sample evaluation datasets of data/ (JSONL and CSV; Parquet comes from
`evalsql`, see the README). The texts are our own, modelled on the kind of data the
Azure AI and Vertex AI evaluation documents use: a retail chatbot for outdoor gear
answering from product documentation (RAG), evaluated per model; multi-turn chats with
citations; and agent runs with tool-call trajectories, evaluated per agent.

Run from the repository root: python3 data/generate.py
"""
import csv
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (query, context, ground_truth, response of model A, response of model B)
QA = [
    ("Which tent has the best rain protection?",
     "The Summit Ridge 2 tent has a rainfly rated at 3000 mm hydrostatic head. The Meadow Dome 4 is rated at 1500 mm. The Trail Nest 1 is rated at 2000 mm.",
     "The Summit Ridge 2 has the best rain protection, with a 3000 mm rainfly.",
     "The Summit Ridge 2 offers the best rain protection: its rainfly is rated at 3000 mm.",
     "The Meadow Dome 4 is the most waterproof tent we sell."),
    ("How much does the Trail Nest 1 weigh?",
     "Trail Nest 1: solo backpacking tent, packed weight 1.1 kg, floor area 2.0 square metres, two aluminium poles.",
     "The Trail Nest 1 weighs 1.1 kg packed.",
     "The Trail Nest 1 has a packed weight of 1.1 kg.",
     "It weighs about 1.1 kilograms when packed, which makes it good for solo trips."),
    ("Can I use the Ember Pro stove indoors?",
     "The Ember Pro camping stove burns isobutane. Never use it inside tents, cabins or any enclosed space: it produces carbon monoxide.",
     "No. The Ember Pro must never be used indoors or in a tent because it produces carbon monoxide.",
     "No. Do not use the Ember Pro indoors or inside a tent; it produces carbon monoxide.",
     "Yes, the Ember Pro is safe indoors as long as you open a window."),
    ("What is the temperature rating of the Polar Cocoon sleeping bag?",
     "Polar Cocoon down sleeping bag: comfort rating -5 °C, limit rating -12 °C, 750-fill goose down, weight 1.4 kg.",
     "The Polar Cocoon has a comfort rating of -5 °C and a limit rating of -12 °C.",
     "Its comfort rating is -5 °C and its limit rating is -12 °C.",
     "The Polar Cocoon is rated to -12 °C."),
    ("How do I clean the Ember Pro stove?",
     "To clean the Ember Pro, let it cool completely, remove the gas canister, then wipe the burner with a dry cloth. Do not immerse it in water.",
     "Let it cool, remove the canister, and wipe the burner with a dry cloth; never put it in water.",
     "Wait until the stove is cool, take off the gas canister and wipe the burner with a dry cloth. Do not immerse it in water.",
     "Rinse the burner under warm water and let it dry overnight."),
    ("What is your return policy?",
     "Unused items can be returned within 60 days with the receipt for a full refund. Used items can be exchanged within 30 days.",
     "Unused items can be returned within 60 days for a full refund; used items can be exchanged within 30 days.",
     "You can return unused items within 60 days with your receipt for a full refund, and exchange used items within 30 days.",
     "All items can be returned within 90 days, no questions asked."),
    ("Do the Ridgeline boots need breaking in?",
     "Ridgeline hiking boots have a full-grain leather upper. We recommend wearing them for 10 to 15 hours on short walks before a long hike.",
     "Yes, wear them for 10 to 15 hours on short walks before a long hike.",
     "Yes. Wear the Ridgeline boots for about 10 to 15 hours on short walks before taking them on a long hike.",
     "No, Ridgeline boots are comfortable straight out of the box."),
    ("How many people fit in the Meadow Dome 4?",
     "Meadow Dome 4: family tent for four people, two doors, two vestibules, peak height 1.8 m.",
     "The Meadow Dome 4 sleeps four people.",
     "The Meadow Dome 4 sleeps four people.",
     "The Meadow Dome 4 is a family tent with room for four people, two doors and a 1.8 m peak height."),
    ("Is the Cascade rain jacket breathable?",
     "The Cascade rain jacket uses a three-layer membrane with 20,000 mm waterproofing and 15,000 g/m²/24h breathability, plus pit zips.",
     "Yes, it is rated at 15,000 g/m²/24h breathability and has pit zips.",
     "Yes. The Cascade is rated at 15,000 g/m²/24h breathability and also has pit zips for venting.",
     "Yes, it is breathable."),
    ("What fuel does the Ember Pro use?",
     "The Ember Pro camping stove burns isobutane-propane mix canisters with a standard threaded valve.",
     "It uses isobutane-propane canisters with a threaded valve.",
     "The Ember Pro uses isobutane-propane canisters with a standard threaded valve.",
     "It runs on white gas or kerosene."),
    ("How long does the Beacon headlamp battery last?",
     "Beacon headlamp: 400 lumens on high for 4 hours, 50 lumens on low for 40 hours; rechargeable over USB-C.",
     "It lasts 4 hours on high and 40 hours on low.",
     "The Beacon lasts 4 hours on high (400 lumens) and 40 hours on low (50 lumens).",
     "The battery lasts around 10 hours."),
    ("How do I charge the Beacon headlamp?",
     "The Beacon headlamp has a built-in battery that charges through its USB-C port in about 3 hours.",
     "Charge it through its USB-C port; a full charge takes about 3 hours.",
     "Plug it into a USB-C charger; it is fully charged in about 3 hours.",
     "Use the included micro-USB cable and charge it overnight."),
    ("Which backpack is best for a weekend trip?",
     "The Switchback 45 is a 45-litre pack for one to three nights. The Daytripper 20 is a 20-litre day pack. The Expedition 70 is for trips longer than five days.",
     "The Switchback 45, a 45-litre pack designed for one to three nights.",
     "For a weekend, take the Switchback 45: it is a 45-litre pack designed for one to three nights.",
     "The Expedition 70 is the best choice for any trip."),
    ("Does the Switchback 45 have a rain cover?",
     "The Switchback 45 comes with an integrated rain cover stored in the bottom pocket.",
     "Yes, it has an integrated rain cover in the bottom pocket.",
     "Yes, there is an integrated rain cover stored in the bottom pocket.",
     "A rain cover is sold separately."),
    ("What is the warranty on Ridgeline boots?",
     "Ridgeline boots carry a two-year warranty against manufacturing defects. Normal wear of the sole is not covered.",
     "Two years against manufacturing defects; normal sole wear is not covered.",
     "Ridgeline boots have a two-year warranty against manufacturing defects, but normal wear of the sole is not covered.",
     "They have a lifetime warranty."),
    ("Can I wash the Polar Cocoon in a machine?",
     "Wash the Polar Cocoon in a front-loading machine on a gentle cycle with down detergent, then tumble dry on low heat with dryer balls.",
     "Yes, in a front-loading machine on a gentle cycle with down detergent, then tumble dry on low with dryer balls.",
     "Yes: use a front-loading machine on a gentle cycle with down detergent, then tumble dry on low heat with dryer balls.",
     "No, it must be dry cleaned only."),
    ("What is the capacity of the Daytripper 20?",
     "The Daytripper 20 day pack holds 20 litres and has a hydration sleeve for a 2-litre reservoir.",
     "It holds 20 litres and has a sleeve for a 2-litre hydration reservoir.",
     "The Daytripper 20 holds 20 litres and fits a 2-litre hydration reservoir.",
     "The Daytripper 20 holds 20 litres."),
    ("Are trekking poles allowed in checked luggage?",
     "Our Summit trekking poles collapse to 62 cm. Most airlines require trekking poles to travel in checked luggage, not in the cabin.",
     "Yes; most airlines require them to be in checked luggage, and they collapse to 62 cm.",
     "Yes, and most airlines actually require trekking poles to go in checked luggage. They collapse to 62 cm.",
     "Trekking poles are banned from all flights."),
    ("How do I pitch the Summit Ridge 2?",
     "To pitch the Summit Ridge 2: stake out the corners, clip the inner tent to the two crossing poles, then throw the rainfly over and buckle it to the corners.",
     "Stake the corners, clip the inner tent to the two crossing poles, then buckle the rainfly to the corners.",
     "Stake out the corners, clip the inner tent to the two crossing poles, put the rainfly over it and buckle it at the corners.",
     "Put up the rainfly first, then hang the inner tent inside it."),
    ("What water filter do you recommend for backpacking?",
     "The ClearFlow squeeze filter weighs 85 g and removes 99.9999% of bacteria. The BaseCamp gravity filter holds 6 litres and suits groups.",
     "The ClearFlow squeeze filter: it weighs 85 g and removes 99.9999% of bacteria.",
     "The ClearFlow squeeze filter is the best fit for backpacking: 85 g and it removes 99.9999% of bacteria.",
     "The BaseCamp gravity filter is the lightest option for backpacking."),
    ("Can the ClearFlow filter remove viruses?",
     "The ClearFlow squeeze filter removes bacteria and protozoa. It does not remove viruses; use purification tablets where viruses are a concern.",
     "No. It removes bacteria and protozoa but not viruses; use purification tablets for viruses.",
     "No, the ClearFlow removes bacteria and protozoa but not viruses. Add purification tablets where viruses are a risk.",
     "Yes, the ClearFlow removes all viruses."),
    ("Do you ship to Canada?",
     "We ship to the United States and Canada. Orders to Canada take 5 to 8 business days and may incur import duties.",
     "Yes, in 5 to 8 business days; import duties may apply.",
     "Yes, we ship to Canada. Delivery takes 5 to 8 business days and import duties may apply.",
     "We only ship within the United States."),
    ("What sizes does the Cascade jacket come in?",
     "The Cascade rain jacket is available in sizes XS, S, M, L, XL and XXL, in men's and women's cuts.",
     "XS to XXL, in men's and women's cuts.",
     "It comes in XS, S, M, L, XL and XXL, with men's and women's cuts.",
     "Sizes S, M and L."),
    ("Is the Meadow Dome 4 freestanding?",
     "The Meadow Dome 4 is fully freestanding; stakes are only needed in wind.",
     "Yes, it is fully freestanding; stakes are only needed in wind.",
     "Yes, the Meadow Dome 4 is fully freestanding, and you only need stakes when it is windy.",
     "No, it needs at least eight stakes to stand."),
    ("How warm is the Alpine fleece?",
     "The Alpine fleece is a 300-weight polyester fleece for cold, dry conditions; it is not windproof.",
     "It is a warm 300-weight fleece for cold, dry conditions, but it is not windproof.",
     "The Alpine fleece is a 300-weight fleece, warm for cold and dry days, though it is not windproof.",
     "The Alpine fleece is windproof and waterproof."),
    ("Can I rent gear instead of buying it?",
     "Tents, sleeping bags and stoves can be rented from our stores for 10% of the retail price per day, with a two-day minimum.",
     "Yes, tents, sleeping bags and stoves rent for 10% of the retail price per day, with a two-day minimum.",
     "Yes. Our stores rent tents, sleeping bags and stoves at 10% of the retail price per day, for at least two days.",
     "Yes, you can rent any product."),
    ("What does the Trail Nest 1 floor measure?",
     "Trail Nest 1: floor area 2.0 square metres, 215 cm long, 95 cm wide at the head.",
     "The floor is 2.0 square metres: 215 cm long and 95 cm wide at the head.",
     "The floor area is 2.0 m², 215 cm long and 95 cm wide at the head.",
     "About 2 square metres."),
    ("Which stove boils water fastest?",
     "Ember Pro boils one litre in 3 minutes 30 seconds. Ember Lite boils one litre in 4 minutes 45 seconds.",
     "The Ember Pro, which boils a litre in 3 minutes 30 seconds.",
     "The Ember Pro is fastest: one litre boils in 3 minutes 30 seconds.",
     "The Ember Lite boils water the fastest."),
    ("Ist das Zelt Summit Ridge 2 für den Winter geeignet?",
     "The Summit Ridge 2 is a three-season tent. It is not designed for heavy snow loads.",
     "Nein, das Summit Ridge 2 ist ein Drei-Jahreszeiten-Zelt und nicht für schwere Schneelasten gebaut.",
     "Nein. Das Summit Ridge 2 ist ein Drei-Jahreszeiten-Zelt und nicht für schwere Schneelasten ausgelegt.",
     "Ja, es ist ein Winterzelt."),
    ("Polar Cocoon 침낭의 쾌적 온도는 몇 도인가요?",
     "Polar Cocoon down sleeping bag: comfort rating -5 °C, limit rating -12 °C.",
     "Polar Cocoon의 쾌적 온도는 -5 °C이고 한계 온도는 -12 °C입니다.",
     "Polar Cocoon 침낭의 쾌적 온도는 -5 °C이며, 한계 온도는 -12 °C입니다.",
     "쾌적 온도는 0 °C입니다."),
]

MODELS = ["gpt-4o", "llama-3.1-8b"]


def qa_rows():
    rows = []
    for i, (query, context, truth, a, b) in enumerate(QA, start=1):
        for model, response in zip(MODELS, (a, b)):
            rows.append({
                "id": f"q{i:02d}",
                "model": model,
                "query": query,
                "context": context,
                "response": response,
                "ground_truth": truth,
            })
    return rows


def cite(n, title, content):
    return {"id": f"doc-{n}", "title": title, "content": content}


# Multi-turn chats: every assistant turn carries the documents it was grounded on.
CONVERSATIONS = [
    ("c01", "gpt-4o", [
        ("How can I check the status of my order?", None),
        ("You can follow your order from the link in your confirmation email, or sign in and open Orders.",
         [cite(1, "Orders and delivery", "Every order confirmation email contains a tracking link. Signed-in customers can also see their orders under Account > Orders.")]),
        ("And how long does delivery to Canada take?", None),
        ("Orders to Canada usually arrive in 5 to 8 business days; import duties may apply.",
         [cite(2, "Shipping", "We ship to the United States and Canada. Orders to Canada take 5 to 8 business days and may incur import duties.")]),
    ]),
    ("c02", "llama-3.1-8b", [
        ("How can I check the status of my order?", None),
        ("Call us any time at our 24-hour hotline and we will read you the status.",
         [cite(1, "Orders and delivery", "Every order confirmation email contains a tracking link. Signed-in customers can also see their orders under Account > Orders.")]),
        ("And how long does delivery to Canada take?", None),
        ("Delivery to Canada takes 5 to 8 business days.",
         [cite(2, "Shipping", "We ship to the United States and Canada. Orders to Canada take 5 to 8 business days and may incur import duties.")]),
    ]),
    ("c03", "gpt-4o", [
        ("I'm going on a three-night hike in autumn. Which tent should I take?", None),
        ("The Summit Ridge 2 is a good fit: a three-season tent with a 3000 mm rainfly.",
         [cite(3, "Summit Ridge 2", "The Summit Ridge 2 is a three-season tent. Its rainfly is rated at 3000 mm hydrostatic head.")]),
        ("Will it handle snow?", None),
        ("Not heavy snow: it is a three-season tent and is not designed for heavy snow loads.",
         [cite(3, "Summit Ridge 2", "The Summit Ridge 2 is a three-season tent. It is not designed for heavy snow loads.")]),
    ]),
    ("c04", "llama-3.1-8b", [
        ("I'm going on a three-night hike in autumn. Which tent should I take?", None),
        ("Take the Meadow Dome 4, it is our lightest tent.",
         [cite(4, "Meadow Dome 4", "Meadow Dome 4: family tent for four people, two doors, two vestibules, peak height 1.8 m.")]),
        ("Will it handle snow?", None),
        ("Yes, all our tents are rated for snow.",
         [cite(3, "Summit Ridge 2", "The Summit Ridge 2 is a three-season tent. It is not designed for heavy snow loads.")]),
    ]),
    ("c05", "gpt-4o", [
        ("Can I drink stream water with the ClearFlow filter?", None),
        ("The ClearFlow removes bacteria and protozoa, but not viruses; where viruses are a concern add purification tablets.",
         [cite(5, "ClearFlow", "The ClearFlow squeeze filter removes bacteria and protozoa. It does not remove viruses; use purification tablets where viruses are a concern.")]),
    ]),
    ("c06", "llama-3.1-8b", [
        ("Can I drink stream water with the ClearFlow filter?", None),
        ("Yes, the ClearFlow makes any water safe to drink.",
         [cite(5, "ClearFlow", "The ClearFlow squeeze filter removes bacteria and protozoa. It does not remove viruses; use purification tablets where viruses are a concern.")]),
    ]),
]


def conversation_rows():
    rows = []
    for cid, model, turns in CONVERSATIONS:
        messages = []
        for text, citations in turns:
            if citations is None:
                messages.append({"role": "user", "content": text})
            else:
                messages.append({"role": "assistant", "content": text,
                                 "context": {"citations": citations}})
        rows.append({"id": cid, "model": model, "messages": messages})
    return rows


def main():
    rows = qa_rows()
    with open(HERE / "qa.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(HERE / "qa.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    with open(HERE / "conversations.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for r in conversation_rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")



# ---------------------------------------------------------------------------------------
# Agent runs: three assistants modelled on Vertex AI's public agent-evaluation scenarios
# (on-device home assistant, customer support, marketing content), two agent versions.
# Trajectories are JSON text, the exact form the trajectory metrics read.
# ---------------------------------------------------------------------------------------

def call(tool, **args):
    return {"tool_name": tool, "tool_input": args}


AGENT_TASKS = [
    # (scenario, query, reference trajectory, reference answer)
    ("on-device", "Turn on the bedroom air conditioner from 11pm to 8am and keep it off otherwise.",
     [call("get_device_info", device_id="ac_bedroom"), call("set_schedule", device_id="ac_bedroom", on="23:00", off="08:00")],
     "The bedroom air conditioner will run from 11pm to 8am."),
    ("on-device", "Set the living room to 21 degrees.",
     [call("get_user_preferences", user_id="u1"), call("set_temperature", room="living_room", celsius=21)],
     "The living room is set to 21 degrees."),
    ("on-device", "Is the front door locked?",
     [call("get_device_info", device_id="lock_front")],
     "Yes, the front door is locked."),
    ("on-device", "Lock the front door and turn off all lights.",
     [call("set_device_info", device_id="lock_front", state="locked"), call("set_lights", room="all", state="off")],
     "The front door is locked and all lights are off."),
    ("on-device", "Dim the kitchen lights to 30 percent.",
     [call("set_lights", room="kitchen", brightness=30)],
     "The kitchen lights are at 30%."),
    ("on-device", "Start the robot vacuum in the hallway.",
     [call("get_device_info", device_id="vacuum"), call("start_cleaning", device_id="vacuum", area="hallway")],
     "The vacuum is cleaning the hallway."),
    ("on-device", "What's the temperature in the nursery?",
     [call("get_sensor_reading", room="nursery", sensor="temperature")],
     "It is 22 degrees in the nursery."),
    ("on-device", "Turn off the TV in 30 minutes.",
     [call("set_timer", device_id="tv_living", action="off", minutes=30)],
     "The TV will turn off in 30 minutes."),
    ("on-device", "Open the garage if my car is home.",
     [call("get_device_info", device_id="car"), call("set_device_info", device_id="garage_door", state="open")],
     "Your car is home, so the garage door is opening."),
    ("on-device", "Set an eco profile for the whole house overnight.",
     [call("get_user_preferences", user_id="u1"), call("set_temperature", room="all", celsius=18), call("set_lights", room="all", state="off")],
     "Eco profile set: 18 degrees and lights off overnight."),
    ("customer-support", "Cancel my pending order and escalate my open support ticket.",
     [call("get_orders", customer_id="c42", status="pending"), call("cancel_order", order_id="o981"), call("escalate_ticket", ticket_id="t77")],
     "Order o981 is cancelled and ticket t77 has been escalated."),
    ("customer-support", "Where is my order o555?",
     [call("get_order_status", order_id="o555")],
     "Order o555 is out for delivery."),
    ("customer-support", "I want a refund for the tent I returned.",
     [call("get_returns", customer_id="c42"), call("issue_refund", order_id="o320", amount=249.0)],
     "A refund of 249.00 has been issued for order o320."),
    ("customer-support", "Change the delivery address of order o777 to 12 Pine Street.",
     [call("get_order_status", order_id="o777"), call("update_address", order_id="o777", address="12 Pine Street")],
     "Order o777 will be delivered to 12 Pine Street."),
    ("customer-support", "Do you have the Trail Nest 1 in stock?",
     [call("check_inventory", sku="trail-nest-1")],
     "Yes, the Trail Nest 1 is in stock."),
    ("customer-support", "Open a ticket: my stove arrived broken.",
     [call("create_ticket", customer_id="c42", category="damaged_item", summary="stove arrived broken")],
     "Ticket created for the damaged stove."),
    ("customer-support", "Apply my loyalty discount to order o888.",
     [call("get_loyalty_status", customer_id="c42"), call("apply_discount", order_id="o888", percent=10)],
     "A 10% loyalty discount is applied to order o888."),
    ("customer-support", "Close my ticket t12, the issue is solved.",
     [call("close_ticket", ticket_id="t12", resolution="solved by customer")],
     "Ticket t12 is closed."),
    ("customer-support", "Which of my orders shipped this week?",
     [call("get_orders", customer_id="c42", status="shipped", since="2026-11-23")],
     "Orders o901 and o905 shipped this week."),
    ("customer-support", "Unsubscribe me from marketing emails.",
     [call("update_preferences", customer_id="c42", marketing_emails=False)],
     "You are unsubscribed from marketing emails."),
    ("content-creation", "Reschedule campaign X on site Y as a one-off on 2024-12-25 with the budget cut by 50%.",
     [call("get_campaign", campaign_id="X"), call("update_budget", campaign_id="X", change_percent=-50), call("schedule_campaign", campaign_id="X", site="Y", date="2024-12-25", recurring=False)],
     "Campaign X runs once on Y on 2024-12-25 with half the budget."),
    ("content-creation", "Draft a tweet announcing our winter sale.",
     [call("generate_copy", channel="twitter", topic="winter sale", max_chars=280)],
     "Winter sale: up to 40% off tents and sleeping bags this week only!"),
    ("content-creation", "Pause all campaigns on site Z.",
     [call("list_campaigns", site="Z"), call("pause_campaign", campaign_id="Z1"), call("pause_campaign", campaign_id="Z2")],
     "Campaigns Z1 and Z2 are paused."),
    ("content-creation", "How did campaign X perform last week?",
     [call("get_campaign_stats", campaign_id="X", period="last_week")],
     "Campaign X had 12,400 impressions and a 3.1% click rate last week."),
    ("content-creation", "Create an A/B test for the headline of the newsletter.",
     [call("create_experiment", asset="newsletter", element="headline", variants=2)],
     "An A/B test with two headline variants is set up."),
    ("content-creation", "Translate the spring banner into German and French.",
     [call("translate_asset", asset_id="banner_spring", language="de"), call("translate_asset", asset_id="banner_spring", language="fr")],
     "The spring banner is available in German and French."),
    ("content-creation", "Double the budget of campaign W.",
     [call("get_campaign", campaign_id="W"), call("update_budget", campaign_id="W", change_percent=100)],
     "Campaign W's budget is doubled."),
    ("content-creation", "Schedule the product video on Instagram every Friday at 6pm.",
     [call("schedule_post", asset_id="video_product", site="instagram", weekday="friday", time="18:00", recurring=True)],
     "The product video posts every Friday at 6pm on Instagram."),
    ("content-creation", "Archive campaigns that ended before October.",
     [call("list_campaigns", ended_before="2026-10-01"), call("archive_campaign", campaign_id="Q3a"), call("archive_campaign", campaign_id="Q3b")],
     "Campaigns Q3a and Q3b are archived."),
    ("content-creation", "Write alt text for the new tent photo.",
     [call("describe_image", asset_id="photo_tent_new")],
     "A green two-person tent pitched on a grassy ridge at sunset."),
]


def agent_rows():
    import random
    rng = random.Random(20261129)
    rows = []
    for i, (scenario, query, ref, answer) in enumerate(AGENT_TASKS, start=1):
        for agent in ("planner-v2", "react-v1"):
            pred = [json.loads(json.dumps(c)) for c in ref]
            response = answer
            failure = False
            # planner-v2 errs rarely; react-v1 more often, in the ways agents do.
            p_err = 0.2 if agent == "planner-v2" else 0.55
            if rng.random() < p_err:
                kind = rng.choice(["extra", "reorder", "args", "missing", "fail"])
                if kind == "extra":
                    pred.insert(rng.randrange(len(pred) + 1), call("get_user_preferences", user_id="u1"))
                elif kind == "reorder" and len(pred) > 1:
                    pred.reverse()
                elif kind == "args":
                    c = pred[-1]
                    key = sorted(c["tool_input"])[0]
                    c["tool_input"][key] = "unknown"
                    response = "I tried, but something may not have worked: " + answer[0].lower() + answer[1:]
                elif kind == "missing" and len(pred) > 1:
                    pred.pop()
                    response = "I could only partly do that."
                elif kind == "fail":
                    pred = pred[:1]
                    response = ""
                    failure = True
            latency = round(rng.uniform(0.6, 2.2) * (1.4 if agent == "planner-v2" else 1.0) * (1 + 0.4 * len(pred)), 3)
            rows.append({
                "id": f"a{i:02d}",
                "agent": agent,
                "scenario": scenario,
                "query": query,
                "response": response,
                "reference": answer,
                "predicted_trajectory": json.dumps(pred),
                "reference_trajectory": json.dumps(ref),
                "latency_in_seconds": latency,
                "failure": int(failure),
            })
    return rows


def write_agents():
    with open(HERE / "agents.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for r in agent_rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
    write_agents()
