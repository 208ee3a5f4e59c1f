"""Product-category templates for the synthetic ProductQA catalog (``agile.envs.catalog_generator``).

Each ``Category`` lists searchable features (brand, snake_case choices, numeric cloze features),
descriptive Title Case features that reasoning questions combine with a piece of knowledge, and
hidden facts that only question history reveals. Adding a category here adds a product group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """A choice feature. ``say`` phrases it as a search condition ({v}: one value or "a or b"),
    ``ask`` as a yes/no question; ``say=None`` keeps it out of search (descriptive feature)."""

    name: str
    values: tuple[str, ...]
    say: str | None = None
    ask: str = "Is the {label} of this {noun} {v}?"
    negate: str | None = None  # the condition's negation ({v}); default "not " + say


@dataclass(frozen=True)
class Cloze:
    """A numeric cloze feature: ``fmt`` as in the real schemas ("up to _ hour(s)")."""

    name: str
    unit: str
    fmt: str
    values: tuple[float, ...]
    label: str


@dataclass(frozen=True)
class Rule:
    """A piece of knowledge per value of one feature, and the questions it answers."""

    feature: str
    questions: tuple[str, ...]
    by_value: dict  # value -> (short answer "yes"/"no", knowledge, long answer)
    kind: str = "functionality"


@dataclass(frozen=True)
class Hidden:
    """A fact known only from past answers: paraphrases, then long answers for yes and no."""

    questions: tuple[str, ...]
    yes: str
    no: str


@dataclass(frozen=True)
class Category:
    key: str
    noun: str          # "kettle"
    one: str           # "a kettle"
    this: str          # "this kettle"
    brands: tuple[str, ...]
    models: tuple[str, ...]
    title: str         # "{brand} {model} ... {color}"; names features of the product
    price: tuple[float, float]
    features: tuple
    rules: tuple[Rule, ...]
    hidden: tuple[Hidden, ...]


def _yn(feature, q, yes, no, yes_long, no_long, kind="functionality"):
    return Rule(feature, q, {"yes": ("yes", yes, yes_long), "no": ("no", no, no_long)}, kind)


_COLOR = "in {v}"
CATEGORIES: tuple[Category, ...] = (
    Category(
        "headphones", "pair of headphones", "a pair of headphones", "these headphones",
        ("Sony", "JBL", "Anker", "Sennheiser", "Skullcandy", "Audio-Technica"),
        ("WH-520", "Tune 510", "Soundcore Q20", "HD 450", "Hesh ANC", "ATH-M40x"),
        "{brand} {model} {connectivity} {headphone_type} Headphones, {playtime}h Playtime, {color}",
        (15, 250),
        (Choice("connectivity", ("wired", "wireless"), "that are {v}", "Are these headphones {v}?",
                "that are not {v}"),
         Choice("headphone_type", ("over-ear", "on-ear", "in-ear"), "of the {v} kind",
                "Are these {v} headphones?"),
         Choice("color", ("black", "white", "blue", "red"), _COLOR, "Do these come in {v}?"),
         Cloze("playtime", "hour", "up to _ hour(s)", (5, 8, 10, 12, 20, 30, 40), "playtime"),
         Choice("Noise Cancelling", ("yes", "no"), ask="Do these headphones have noise cancelling?"),
         Choice("Foldable Design", ("yes", "no"), ask="Do these headphones fold up?")),
        (_yn("Noise Cancelling",
             ("Will these help me block out engine noise on a plane?",
              "Can these shut out the hum of a train on my commute?"),
             "headphones with active noise cancelling suppress steady low-frequency noise such as "
             "engine hum, which suits flights and commutes.",
             "headphones without active noise cancelling block sound only passively, so steady "
             "engine hum still comes through.",
             "Yes. Their active noise cancelling suppresses steady low hum like engines.",
             "No. They lack active noise cancelling, so steady engine hum still gets through."),
         Rule("connectivity", ("Will I have to recharge these on a long trip?",),
              {"wireless": ("yes", "wireless headphones run on a built-in battery that has to "
                            "be recharged.", "Yes. They are wireless and run on a battery that "
                            "needs recharging."),
               "wired": ("no", "wired headphones draw power from the source and never need "
                         "charging.", "No. They are wired and take power from your device.")}),
         Rule("headphone_type", ("Are these good for jogging?", "Will these stay on while I run?"),
              {"in-ear": ("yes", "in-ear headphones sit in the ear canal and stay put while "
                          "running.", "Yes. In-ear buds sit in the ear canal and stay in place."),
               "on-ear": ("no", "on-ear headphones press on the ears and slide off with the "
                          "bounce of running.", "No. On-ear headphones tend to slide when you run."),
               "over-ear": ("no", "over-ear headphones are heavy and shift and trap heat during "
                            "running.", "No. Over-ear headphones are heavy and shift as you run.")},
              "experience")),
        (Hidden(("Are these comfortable to wear for a few hours?",
                 "Can I wear these all afternoon without sore ears?"),
                "Yes, buyers say they stay comfortable over long sessions.",
                "No, several buyers say they pinch after an hour or so."),
         Hidden(("Is the bass strong on these?", "Do these have punchy bass?"),
                "Yes, reviewers describe the bass as deep and punchy.",
                "No, reviewers find the bass thin."),
         Hidden(("Does the headband feel sturdy?", "Is the headband well built?"),
                "Yes, the headband is reported to be solid.",
                "No, a few buyers report the headband cracking.")),
    ),
    Category(
        "kettles", "kettle", "a kettle", "this kettle",
        ("Cuisinart", "Hamilton Beach", "Cosori", "Mueller", "Chefman", "Bonavita"),
        ("PerfecTemp", "Ultra", "Speed-Boil", "Original", "Electric Pro", "Gooseneck"),
        "{brand} {model} Electric Kettle, {capacity} Liter, {material}, {power}W, {color}",
        (18, 120),
        (Choice("material", ("stainless steel", "glass", "plastic"), "made of {v}",
                "Is this kettle made of {v}?"),
         Choice("color", ("silver", "black", "white", "red"), _COLOR, "Does this kettle come in {v}?"),
         Cloze("capacity", "liter", "_ liter(s)", (1.0, 1.2, 1.5, 1.7, 1.8, 2.0), "capacity"),
         Cloze("power", "watt", "_ watt(s)", (900, 1000, 1200, 1500, 1800), "power"),
         Choice("Auto Shut-off", ("yes", "no"), ask="Does this kettle switch itself off?"),
         Choice("Temperature Control", ("variable", "single setting"))),
        (_yn("Auto Shut-off",
             ("Is it safe to walk away while this kettle is boiling?",
              "Can I leave this kettle unattended while it heats up?"),
             "kettles with an automatic shut-off switch themselves off once the water boils, so "
             "they can be left unattended.",
             "kettles without automatic shut-off keep heating until switched off by hand and "
             "should not be left unattended.",
             "Yes. It switches itself off once the water boils.",
             "No. It has no automatic shut-off, so stay with it until you switch it off."),
         Rule("Temperature Control",
              ("Can I heat water to the right temperature for green tea with this kettle?",),
              {"variable": ("yes", "kettles with variable temperature control can stop below "
                            "boiling, such as 80 C for green tea.", "Yes. Its variable "
                            "temperature control can stop at 80 C for green tea."),
               "single setting": ("no", "kettles with a single setting only bring water to a full "
                                  "boil.", "No. It only heats water to a full boil.")}),
         Rule("material", ("Can I watch the water boil through the side of this kettle?",),
              {"glass": ("yes", "glass kettles show the water level and the boil through the "
                         "body.", "Yes. The glass body shows the water as it boils."),
               "stainless steel": ("no", "stainless steel kettles are opaque.",
                                   "No. The stainless steel body is opaque."),
               "plastic": ("no", "plastic kettles have an opaque body with at most a level "
                           "window.", "No. The plastic body is opaque.")},
              "experience")),
        (Hidden(("Is the lid easy to open with one hand?", "Does the lid open easily?"),
                "Yes, the lid pops open with one press.", "No, buyers say the lid is stiff."),
         Hidden(("Does the handle stay cool while it boils?",
                 "Does the handle stay cool to the touch?"),
                "Yes, the handle stays cool to the touch.",
                "No, the handle warms up noticeably at the boil."),
         Hidden(("Is this kettle quiet when boiling?", "Does this kettle boil quietly?"),
                "Yes, reviewers call it quiet.", "No, reviewers say it is loud near the boil.")),
    ),
    Category(
        "backpacks", "backpack", "a backpack", "this backpack",
        ("Osprey", "JanSport", "Samsonite", "The North Face", "Herschel", "AmazonBasics"),
        ("Daylite", "SuperBreak", "Tectonic", "Borealis", "Little America", "Commuter"),
        "{brand} {model} Backpack, {capacity}L, Fits {laptop_size}&quot; Laptop, {material}, {color}",
        (25, 180),
        (Choice("material", ("nylon", "polyester", "canvas", "leather"), "made of {v}",
                "Is this backpack made of {v}?"),
         Choice("color", ("black", "grey", "navy", "green"), _COLOR, "Does this backpack come in {v}?"),
         Cloze("capacity", "liter", "_ liter(s)", (15, 20, 25, 30, 35, 40), "capacity"),
         Cloze("laptop_size", "inch", "_ inches", (13, 14, 15.6, 17), "laptop size"),
         Choice("Water Resistance", ("good", "fair", "poor")),
         Choice("Hip Belt", ("yes", "no"), ask="Does this backpack have a hip belt?")),
        (Rule("Water Resistance",
              ("Will my laptop stay dry if I get caught in heavy rain with this backpack?",),
              {"good": ("yes", "backpacks with good water resistance use coated fabric and sealed "
                        "zips that keep a downpour out.", "Yes. Its coated fabric and sealed "
                        "zips keep heavy rain out."),
               "fair": ("no", "backpacks with fair water resistance shrug off drizzle but soak "
                        "through in a downpour.", "No. It handles drizzle but soaks through in "
                        "heavy rain."),
               "poor": ("no", "backpacks with poor water resistance let rain through quickly.",
                        "No. Rain gets through quickly; use a cover.")}),
         _yn("Hip Belt",
             ("Is this backpack comfortable for a full-day hike with a heavy load?",
              "Will my shoulders hurt carrying a heavy load all day in this?"),
             "backpacks with a hip belt move most of a heavy load onto the hips, which keeps long "
             "hikes comfortable.",
             "backpacks without a hip belt put the whole load on the shoulders, which tires them "
             "on long hikes.",
             "Yes. The hip belt carries most of the weight on your hips.",
             "No. Without a hip belt the load sits on your shoulders.", "experience")),
        (Hidden(("Are the zippers sturdy?", "Do the zips hold up over time?"),
                "Yes, the zippers are reported to be robust.",
                "No, a few buyers had zippers fail within months."),
         Hidden(("Does the laptop sleeve have padding?", "Is the laptop compartment padded?"),
                "Yes, the laptop sleeve is padded.", "No, the sleeve is unpadded fabric."),
         Hidden(("Does it have a water bottle pocket?", "Is there a side pocket for a bottle?"),
                "Yes, there is a stretch side pocket for a bottle.",
                "No, it has no bottle pocket.")),
    ),
    Category(
        "desk_lamps", "desk lamp", "a desk lamp", "this lamp",
        ("TaoTronics", "BenQ", "Lampat", "Phive", "IKEA", "OttLite"),
        ("TT-DL13", "e-Reading", "Slim", "Flex", "Forsa", "Wellness"),
        "{brand} {model} Desk Lamp, {light_source}, {brightness} Lumens, {color}",
        (15, 150),
        (Choice("light_source", ("LED", "halogen", "incandescent"), "with {v} lighting",
                "Does this lamp use {v} lighting?", "without {v} lighting"),
         Choice("color", ("black", "white", "silver"), _COLOR, "Does this lamp come in {v}?"),
         Cloze("brightness", "lumen", "_ lumens", (300, 400, 500, 600, 800, 1000), "brightness"),
         Cloze("color_temperature", "K", "_ K", (2700, 3000, 4000, 5000, 6500), "color temperature"),
         Choice("Dimmable", ("yes", "no"), ask="Is this lamp dimmable?"),
         Choice("USB Charging Port", ("yes", "no"), ask="Does this lamp have a USB port?")),
        (_yn("Dimmable",
             ("Can I turn the brightness down for reading at night?",
              "Can I make this lamp dimmer?"),
             "dimmable lamps let the light be turned down for low-light reading.",
             "lamps that are not dimmable only switch between on and off.",
             "Yes. It is dimmable, so you can turn it down.",
             "No. It only switches on and off."),
         _yn("USB Charging Port", ("Can I charge my phone from this lamp?",),
             "lamps with a USB charging port can charge a phone from the base.",
             "lamps without a USB port cannot charge other devices.",
             "Yes. The base has a USB port for your phone.", "No. It has no USB port."),
         Rule("light_source", ("Does this lamp stay cool to the touch after hours of use?",),
              {"LED": ("yes", "LED lamps turn most power into light and stay cool.",
                       "Yes. Its LED light stays cool."),
               "halogen": ("no", "halogen bulbs run hot enough to burn fingers.",
                           "No. Halogen bulbs get very hot."),
               "incandescent": ("no", "incandescent bulbs turn most power into heat.",
                                "No. The incandescent bulb gets hot.")},
              "experience")),
        (Hidden(("Is the base stable?", "Does this lamp stand steady on the desk?"),
                "Yes, the weighted base keeps it steady.", "No, the base is light and tips."),
         Hidden(("Does the arm hold its position?", "Does the arm stay where I put it?"),
                "Yes, the arm stays where you set it.", "No, the arm droops over time."),
         Hidden(("Is the light free of flicker?", "Does the light avoid flickering?"),
                "Yes, reviewers see no flicker.", "No, some buyers notice flicker when dimmed.")),
    ),
    Category(
        "blenders", "blender", "a blender", "this blender",
        ("Vitamix", "Ninja", "Oster", "NutriBullet", "Hamilton Beach", "KitchenAid"),
        ("E310", "Professional", "Pro", "Select", "Wave", "K150"),
        "{brand} {model} Blender, {power} Watts, {jar_capacity} oz {jar_material} Jar, {color}",
        (30, 400),
        (Choice("jar_material", ("glass", "plastic", "stainless steel"), "with a {v} jar",
                "Does this blender have a {v} jar?", "without a {v} jar"),
         Choice("color", ("black", "red", "silver", "white"), _COLOR,
                "Does this blender come in {v}?"),
         Cloze("power", "watt", "_ watt(s)", (300, 500, 700, 900, 1000, 1200, 1500), "power"),
         Cloze("jar_capacity", "ounce", "_ ounce(s)", (24, 32, 48, 64, 72), "jar capacity"),
         Choice("Ice Crushing", ("good", "fair", "poor")),
         Choice("Dishwasher Safe Parts", ("yes", "no"), ask="Are the parts dishwasher safe?")),
        (Rule("Ice Crushing",
              ("Can this blender make smoothies from frozen fruit and ice?",
               "Will this blender crush ice?"),
              {"good": ("yes", "blenders with good ice crushing turn ice and frozen fruit into "
                        "smooth drinks.", "Yes. It crushes ice and frozen fruit smoothly."),
               "fair": ("no", "blenders with fair ice crushing leave chunks unless there is a lot "
                        "of liquid.", "No. It leaves chunks of ice and frozen fruit."),
               "poor": ("no", "blenders with poor ice crushing stall on ice.",
                        "No. It stalls on ice.")}),
         _yn("Dishwasher Safe Parts", ("Can I put the jar in the dishwasher?",),
             "blenders with dishwasher-safe parts can have jar and lid washed by machine.",
             "blenders without dishwasher-safe parts need the jar washed by hand.",
             "Yes. The jar and lid are dishwasher safe.", "No. Wash the jar by hand.")),
        (Hidden(("Is this blender loud?", "Does it make a lot of noise?"),
                "Yes, it is loud at full speed.", "No, it is quieter than most."),
         Hidden(("Does the lid leak?", "Does liquid leak from the lid?"),
                "Yes, some buyers report the lid leaking when full.",
                "No, the lid seals well."),
         Hidden(("Does the motor hold up to daily use?", "Is the motor durable?"),
                "Yes, owners report years of daily use.",
                "No, a few motors burned out within a year.")),
    ),
    Category(
        "water_bottles", "water bottle", "a water bottle", "this bottle",
        ("Hydro Flask", "Nalgene", "CamelBak", "Contigo", "Yeti", "Thermos"),
        ("Wide Mouth", "Everyday", "Chute", "Autoseal", "Rambler", "FUNtainer"),
        "{brand} {model} Water Bottle, {capacity} oz, {material}, {color}",
        (8, 50),
        (Choice("material", ("stainless steel", "plastic", "glass", "aluminum"), "made of {v}",
                "Is this bottle made of {v}?"),
         Choice("color", ("black", "blue", "pink", "green", "white"), _COLOR,
                "Does this bottle come in {v}?"),
         Cloze("capacity", "ounce", "_ ounce(s)", (12, 18, 24, 32, 40), "capacity"),
         Choice("Insulation", ("double-wall vacuum", "single-wall")),
         Choice("Lid Type", ("straw lid", "chug cap", "flip spout"))),
        (Rule("Insulation", ("Will my water still be cold after a day in a hot car?",),
              {"double-wall vacuum": ("yes", "double-wall vacuum bottles keep drinks cold for a "
                                      "day.", "Yes. The vacuum insulation keeps it cold all day."),
               "single-wall": ("no", "single-wall bottles warm up to the surrounding air within "
                               "an hour.", "No. It is single-wall and warms up quickly.")}),
         Rule("Lid Type", ("Can I drink from it without tilting my head back?",),
              {"straw lid": ("yes", "bottles with a straw lid let you sip upright.",
                             "Yes. The straw lid lets you sip upright."),
               "flip spout": ("yes", "bottles with a flip spout can be sipped with a small tilt.",
                              "Yes. The spout needs only a small tilt."),
               "chug cap": ("no", "bottles with a chug cap need tipping back to drink.",
                            "No. The chug cap needs you to tip it back.")},
              "experience"),
         Rule("material", ("Is this bottle a good choice for rocky hiking trails?",),
              {"glass": ("no", "glass bottles can shatter when dropped on rock.",
                         "No. Glass can shatter on rock."),
               "stainless steel": ("yes", "stainless steel bottles survive drops.",
                                   "Yes. Stainless steel survives drops."),
               "plastic": ("yes", "plastic bottles are light and bounce when dropped.",
                           "Yes. Plastic is light and survives drops."),
               "aluminum": ("yes", "aluminum bottles dent but do not break.",
                            "Yes. Aluminum may dent but will not break.")})),
        (Hidden(("Does it leak in a bag?", "Will it leak if I lay it on its side?"),
                "Yes, some buyers found leaks when it lay flat.", "No, it stays sealed in a bag."),
         Hidden(("Does it fit in a car cup holder?", "Will it fit my cup holder?"),
                "Yes, it fits standard cup holders.", "No, it is too wide for most cup holders."),
         Hidden(("Does the paint chip easily?", "Will the coating chip?"),
                "Yes, the coating chips when knocked.", "No, the coating holds up well.")),
    ),
    Category(
        "keyboards", "keyboard", "a keyboard", "this keyboard",
        ("Logitech", "Corsair", "Razer", "Keychron", "Microsoft", "HyperX"),
        ("K120", "K70", "BlackWidow", "K2", "Sculpt", "Alloy"),
        "{brand} {model} {switch_type} Keyboard, {layout}, {connectivity}, {color}",
        (15, 200),
        (Choice("switch_type", ("mechanical", "membrane", "scissor"), "with {v} switches",
                "Does this keyboard have {v} switches?", "without {v} switches"),
         Choice("connectivity", ("wired", "wireless", "bluetooth"), "that is {v}",
                "Is this keyboard {v}?", "that is not {v}"),
         Choice("layout", ("full-size", "tenkeyless", "60%"), "with a {v} layout",
                "Is this a {v} keyboard?"),
         Choice("color", ("black", "white", "grey"), _COLOR, "Does this keyboard come in {v}?"),
         Cloze("weight", "gram", "_ g", (450, 600, 750, 900, 1100), "weight"),
         Choice("Backlight", ("RGB", "white", "none")),
         Choice("Spill Resistance", ("yes", "no"), ask="Is this keyboard spill resistant?")),
        (Rule("Backlight", ("Can I see the keys when typing in a dark room?",),
              {"RGB": ("yes", "keyboards with RGB backlighting light up every key.",
                       "Yes. The RGB backlight lights every key."),
               "white": ("yes", "keyboards with a white backlight light up every key.",
                         "Yes. The white backlight lights the keys."),
               "none": ("no", "keyboards without a backlight leave the keys dark.",
                        "No. It has no backlight.")}),
         Rule("switch_type", ("Is this keyboard quiet enough for a shared office?",),
              {"mechanical": ("no", "mechanical switches click or clack loudly on each press.",
                              "No. Mechanical switches are loud."),
               "membrane": ("yes", "membrane keyboards are soft and quiet.",
                            "Yes. Membrane keys are quiet."),
               "scissor": ("yes", "scissor switches are low and quiet.",
                           "Yes. Scissor switches are quiet.")},
              "experience"),
         _yn("Spill Resistance", ("Will it survive if I spill coffee on it?",),
             "spill-resistant keyboards drain liquid away from the electronics.",
             "keyboards without spill resistance can short out when liquid gets in.",
             "Yes. It is spill resistant and drains liquid away.",
             "No. A spill can damage it.")),
        (Hidden(("Do the keycaps go shiny quickly?", "Do the keys get shiny with use?"),
                "Yes, the keycaps shine within months.", "No, the keycaps keep their texture."),
         Hidden(("Does it wobble on the desk?", "Does it rock on the desk?"),
                "Yes, some units rock slightly.", "No, it sits flat and steady."),
         Hidden(("Is the companion software easy to use?", "Is the app simple to set up?"),
                "Yes, the software is straightforward.", "No, buyers find the software clunky.")),
    ),
    Category(
        "tents", "tent", "a tent", "this tent",
        ("Coleman", "REI Co-op", "Marmot", "Big Agnes", "Kelty", "MSR"),
        ("Sundome", "Half Dome", "Tungsten", "Copper Spur", "Late Start", "Hubba Hubba"),
        "{brand} {model} {capacity}-Person {season} Tent, {weight} lbs, {color}",
        (60, 500),
        (Choice("season", ("3-season", "4-season"), "rated {v}", "Is this a {v} tent?"),
         Choice("color", ("green", "orange", "grey", "blue"), _COLOR, "Does this tent come in {v}?"),
         Cloze("capacity", "person", "_ person", (1, 2, 3, 4, 6), "sleeping capacity"),
         Cloze("weight", "pound", "_ pound(s)", (2.5, 3.5, 4.6, 6, 8.5, 12), "weight"),
         Choice("Rainfly", ("full coverage", "partial", "none")),
         Choice("Setup", ("freestanding", "non-freestanding"))),
        (Rule("season", ("Can I camp with this tent in snow?",),
              {"4-season": ("yes", "4-season tents have strong poles and solid walls that bear "
                            "snow load.", "Yes. It is a 4-season tent built for snow."),
               "3-season": ("no", "3-season tents have mesh walls and light poles that give way "
                            "under snow.", "No. It is a 3-season tent, not built for snow.")}),
         Rule("Rainfly", ("Will I stay dry in heavy rain in this tent?",),
              {"full coverage": ("yes", "tents with a full-coverage rainfly shed heavy rain.",
                                 "Yes. Its full-coverage rainfly sheds heavy rain."),
               "partial": ("no", "tents with a partial rainfly let wind-driven rain in at the "
                           "sides.", "No. Rain blows in under the partial fly."),
               "none": ("no", "tents without a rainfly leak in heavy rain.",
                        "No. It has no rainfly.")}),
         Rule("Setup", ("Can I pitch this tent on rock where stakes will not go in?",),
              {"freestanding": ("yes", "freestanding tents stand on their poles without "
                                "stakes.", "Yes. It is freestanding and needs no stakes."),
               "non-freestanding": ("no", "non-freestanding tents need stakes to stand.",
                                    "No. It needs stakes to stand up.")},
              "experience")),
        (Hidden(("Is it easy to set up alone?", "Can one person pitch it?"),
                "Yes, one person can pitch it in minutes.", "No, it really takes two people."),
         Hidden(("Does condensation build up inside?", "Does it get damp inside overnight?"),
                "Yes, campers report condensation on cold nights.",
                "No, it vents well and stays dry inside."),
         Hidden(("Are the poles sturdy?", "Do the poles hold up in wind?"),
                "Yes, the poles hold up in strong wind.", "No, a pole bent in strong wind.")),
    ),
)
CATEGORY_KEYS = tuple(c.key for c in CATEGORIES)
